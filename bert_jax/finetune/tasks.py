"""The three task families, each a format's reader, encoder, metrics and prediction writer:
TextTask (GLUE TSV), TaggingTask (CoNLL: its reader and writer end this module), SpanTask (SQuAD).
"""

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bert_jax import cli, storage
from bert_jax.finetune import encode, glue, metrics, squad


@dataclasses.dataclass
class Dataset:
    examples: list  # as read from the file
    arrays: dict[str, np.ndarray]  # model inputs and labels, [rows, ...]
    meta: Any = None  # the task's post-processing information
    has_labels: bool = True

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))


class TextTask:
    """Single sentences or sentence pairs in a GLUE layout -> classes (or a score)."""

    def __init__(self, data):
        self.data = data
        self.layout = glue.get_layout(data.layout)
        self.kind = "classification" if self.layout.labels else "regression"

    def labels(self, train_examples: list | None) -> tuple[str, ...]:
        return label_names(self.data.labels) or self.layout.labels

    def read(self, path: str) -> list:
        return glue.read_tsv(path, self.layout)

    def encode(self, tok, examples, labels, training: bool) -> Dataset:
        arrays = encode.encode_texts(tok, examples, self.data.max_seq_length, labels)
        return Dataset(examples, arrays, None, all(e.label is not None for e in examples))

    def _predictions(self, outputs: np.ndarray) -> np.ndarray:
        return outputs if self.kind == "regression" else np.argmax(outputs, axis=-1)

    def metrics(self, ds: Dataset, outputs, labels) -> dict[str, float]:
        preds, gold = self._predictions(outputs), ds.arrays[encode.LABEL]
        if self.kind == "regression":
            return metrics.regression_metrics(preds, gold)
        return metrics.classification_metrics(preds, gold, labels)

    def write(self, path: str, ds: Dataset, outputs, labels) -> None:
        value = float if self.kind == "regression" else lambda p: labels[int(p)]
        glue.write_predictions(path, ds.examples, [value(p) for p in self._predictions(outputs)])


class TaggingTask:
    """CoNLL token files -> one tag per word."""

    kind = "tagging"

    def __init__(self, data):
        self.data = data

    def labels(self, train_examples: list | None) -> tuple[str, ...]:
        """Tag names in id order: config.data.labels, else the tags of the training file."""
        if label_names(self.data.labels):
            return label_names(self.data.labels)
        if train_examples is None:
            raise cli.UserError(
                "config.data.labels is empty and there is no training file to take the tag set from"
            )
        if not any(s.tags for s in train_examples):  # a words-only (prediction) file
            raise encode.FormatError(
                f"{self.data.train_file} has no tag column: a training file needs `word ... tag` "
                "lines"
            )
        return tag_set(train_examples)

    def read(self, path: str) -> list:
        return read_conll(path, self.data.tag_column)

    def encode(self, tok, examples, labels, training: bool) -> Dataset:
        arrays, starts = encode.encode_tagged(tok, examples, self.data.max_seq_length, labels)
        return Dataset(examples, arrays, starts, all(s.tags is not None for s in examples))

    def _predictions(self, ds: Dataset, outputs, labels) -> list[list[str]]:
        return encode.word_predictions(np.argmax(outputs, axis=-1), ds.meta, labels)

    def metrics(self, ds: Dataset, outputs, labels) -> dict[str, float]:
        return metrics.entity_f1(
            [s.tags for s in ds.examples], self._predictions(ds, outputs, labels)
        )

    def write(self, path: str, ds: Dataset, outputs, labels) -> None:
        write_conll(path, ds.examples, self._predictions(ds, outputs, labels))


class SpanTask:
    """SQuAD v1.1 / v2.0 questions -> answer spans of the context."""

    kind = "span"

    def __init__(self, data):
        self.data = data

    def labels(self, train_examples: list | None) -> tuple[str, ...]:
        return ()  # spans have no label names

    def read(self, path: str) -> list:
        return squad.read_squad(path)

    def encode(self, tok, examples, labels, training: bool) -> Dataset:
        d = self.data
        arrays, windows, contexts = squad.encode_squad(
            tok, examples, d.max_seq_length, d.doc_stride, d.max_query_length, is_training=training
        )
        # v2.0: a question without answers is unanswerable; a file with none is a test file.
        labelled = [bool(e.answers or e.is_impossible) for e in examples]
        has_labels = all(labelled) or (bool(d.version_2_with_negative) and any(labelled))
        return Dataset(examples, arrays, (windows, contexts), has_labels)

    def answers(self, ds: Dataset, outputs) -> tuple[dict[str, str], dict[str, float]]:
        d = self.data
        return squad.best_answers(
            ds.examples,
            *ds.meta,  # windows, contexts
            *outputs,  # start and end logits
            n_best_size=d.n_best_size,
            max_answer_length=d.max_answer_length,
            version_2_with_negative=d.version_2_with_negative,
            null_score_diff_threshold=d.null_score_diff_threshold,
        )

    def metrics(self, ds: Dataset, outputs, labels) -> dict[str, float]:
        answers, _ = self.answers(ds, outputs)
        gold = {e.qid: squad.gold_answers(e) for e in ds.examples}
        return metrics.squad_scores(answers, gold, bool(self.data.version_2_with_negative))

    def write(self, path: str, ds: Dataset, outputs, labels) -> None:
        squad.write_predictions(path, *self.answers(ds, outputs))


FORMATS = {"glue": TextTask, "conll": TaggingTask, "squad": SpanTask}


def read_examples(task, path: str) -> list:
    """The examples of one data file; none (empty, or a header only) is an error naming it."""
    try:
        examples = task.read(path)
    except UnicodeDecodeError as e:  # every reader opens its file as UTF-8
        raise encode.FormatError(
            f"{path} is not UTF-8 text ({_first_bad_byte(path, e)}); convert it, e.g. "
            "iconv -t UTF-8"
        ) from None
    if not examples:
        raise encode.FormatError(
            f"{path} holds no examples (only a header or blank lines?); point the config at the "
            "file with the data"
        )
    return examples


def _first_bad_byte(path: str, error: UnicodeDecodeError) -> str:
    """'line L, byte B: reason' of the file's first byte that is not UTF-8. The readers' own
    error counts from where they decoded (a CoNLL column, a text-mode chunk, after a BOM)."""
    data = storage.read_bytes(path)
    try:
        data.decode("utf-8")  # a BOM is U+FEFF here, so offsets are the file's
    except UnicodeDecodeError as e:
        error = e
    line = data.count(b"\n", 0, error.start) + 1
    return f"line {line}, byte {error.start}: {error.reason}"


def make_task(data):
    if not isinstance(data.format, str) or data.format not in FORMATS:
        raise cli.UserError(f"config.data.format={data.format!r}; choose one of {sorted(FORMATS)}")
    return FORMATS[data.format](data)


def primary_metric(task, data) -> str:
    """The figure a run is judged by: config.data.metric, else the benchmark's usual one."""
    if data.metric:
        return data.metric
    if not isinstance(task, TextTask):
        return "f1"
    return {"cola": "mcc", "mrpc": "f1", "qqp": "f1", "stsb": "pearson"}.get(
        data.layout, "accuracy"
    )


def metric_names(data) -> tuple[str, ...] | None:
    """The figures an eval of `config.data` gives (metrics.py's), for checking data.metric; None
    where the config alone cannot tell (an unknown format or layout: refused elsewhere)."""
    if data.format == "conll":
        return ("precision", "recall", "f1", "accuracy")
    if data.format == "squad":
        return ("exact", "f1", "has_ans_exact", "has_ans_f1", "no_ans_exact", "no_ans_f1")
    if data.format != "glue" or not isinstance(data.layout, str) or data.layout not in glue.LAYOUTS:
        return None
    layout = glue.LAYOUTS[data.layout]
    if not layout.labels:
        return ("pearson", "spearman", "mse")
    labels = label_names(data.labels) or layout.labels
    if len(labels) <= 2:
        return ("accuracy", "mcc", "f1")[: 2 + (len(labels) == 2)]
    scores = ("precision", "recall", "f1")
    per_class = tuple(f"{name}/{label}" for label in labels for name in scores)
    return ("accuracy", "mcc", *(f"macro_{name}" for name in scores), *per_class)


def label_names(labels) -> tuple[str, ...]:
    """config.data.labels as names (strings): ml_collections reads --config.data.labels=neg,pos
    as the one name 'neg,pos' (split here) and =0,1 as integers; an empty override is none."""
    if isinstance(labels, str):
        labels = (labels,)
    if not isinstance(labels, (list, tuple)):  # a saved run's config edited by hand, say
        raise cli.UserError(f"config.data.labels={labels!r}: expected label names, e.g. neg,pos")
    if tuple(labels) == ("",):
        return ()
    if len(labels) == 1 and isinstance(labels[0], str) and "," in labels[0]:
        labels = split_files(labels[0])
    return tuple(str(label) for label in labels)


def split_files(spec: str) -> list[str]:
    """Comma-separated paths (config.data.eval_files) -> list, empty entries dropped."""
    return [p.strip() for p in spec.split(",") if p.strip()] if spec else []


DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    guid: str  # "<file stem>-<line number of the first token>"
    words: tuple[str, ...]
    tags: tuple[str, ...] | None  # None for files without the tag column
    line: int = dataclasses.field(default=0, compare=False)  # its first token's line in the file


def read_conll(path: str, tag_column: int = -1) -> list[TaggedSentence]:
    """A CoNLL file: a token a line (`word POS chunk NER`), a blank line between sentences,
    `-DOCSTART-` lines between documents; tags from `tag_column` (none in a words-only file)."""
    storage.check_file(path, "data file")
    stem = os.path.splitext(os.path.basename(path))[0]
    sentences: list[TaggedSentence] = []
    tokens: list[tuple[int, str, str | None]] = []  # (line, word, tag) of the open sentence
    has_tags: bool | None = None  # decided by the first token line, then enforced
    first_line = 0

    def flush():
        if tokens:
            lines, words, tags = zip(*tokens)
            guid = f"{stem}-{lines[0]}"
            sentences.append(TaggedSentence(guid, words, tags if has_tags else None, lines[0]))
            tokens.clear()

    with storage.open_read(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            # Columns split at ASCII whitespace only, as conlleval does (not at a no-break space).
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a BOM is no text (nor -DOCSTART-'s)
            cols = [c.decode("utf-8") for c in raw.split()]
            if not cols or cols[0] == DOCSTART:
                flush()
                continue
            if has_tags is None:
                has_tags, first_line = len(cols) > 1, n
            elif not has_tags and len(cols) > 1:  # the file is tagged but its first line lost it
                raise encode.FormatError(
                    f"{path}:{first_line}: a word without a tag, but line {n} has {len(cols)} "
                    "columns; give every token line its tag (or none, for prediction)"
                )
            if has_tags:
                if len(cols) < 2 or not -len(cols) <= tag_column < len(cols):
                    raise encode.FormatError(
                        f"{path}:{n}: {len(cols)} columns, cannot take tag column "
                        f"{tag_column} (config.data.tag_column); earlier lines have tags"
                    )
            tokens.append((n, cols[0], cols[tag_column] if has_tags else None))
    flush()
    if not sentences:
        raise encode.FormatError(
            f"{path} holds no sentences: expected one `word ... tag` line per token "
            "and a blank line between sentences"
        )
    return sentences


def tag_set(sentences: Sequence[TaggedSentence]) -> tuple[str, ...]:
    """The tags seen in a training file (TaggingTask.labels: it has some), sorted, "O" first."""
    seen = {t for s in sentences for t in (s.tags or ())}
    return tuple(sorted(seen, key=lambda t: (t != "O", t)))


def write_conll(
    path: str, sentences: Sequence[TaggedSentence], predictions: Sequence[Sequence[str]]
) -> None:
    """`word [gold] predicted` per line, a blank line between sentences: conlleval's input."""
    if len(sentences) != len(predictions):
        raise ValueError(f"{len(sentences)} sentences but {len(predictions)} predictions")
    storage.makedirs(storage.dirname(path))
    with storage.open_write(path, "w") as f:
        for sentence, tags in zip(sentences, predictions):
            gold = sentence.tags or [None] * len(sentence.words)
            for word, g, p in zip(sentence.words, gold, tags):
                f.write(f"{word} {g} {p}\n" if g is not None else f"{word} {p}\n")
            f.write("\n")
