"""CoNLL-2003 style token files -> tagged sentences, and predictions back to that format.

One token per line, whitespace-separated columns (CoNLL-2003: `word POS chunk NER`), a blank
line between sentences, `-DOCSTART-` lines between documents. The tag to learn is one column
(the last, NER, by default; 1 for POS tags). A file with only the word column is read without
tags, for prediction.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from bert_jax import storage
from bert_jax.finetune.encode import FormatError

DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class TaggedSentence:
    guid: str  # "<file stem>-<line number of the first token>"
    words: tuple[str, ...]
    tags: tuple[str, ...] | None  # None for files without the tag column


def read_conll(path: str, tag_column: int = -1) -> list[TaggedSentence]:
    """Reads a CoNLL file; `tag_column` indexes the whitespace-split columns (-1: the last)."""
    storage.check_file(path, "data file")
    stem = os.path.splitext(os.path.basename(path))[0]
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0
    has_tags: bool | None = None  # decided by the first token line, then enforced

    def flush():
        if words:
            sentences.append(
                TaggedSentence(f"{stem}-{start}", tuple(words), tuple(tags) if has_tags else None)
            )
            words.clear()
            tags.clear()

    with storage.open_read(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            # Columns split at ASCII whitespace only (bytes.split), as conlleval and the usual
            # readers do: str.split() also cut words at no-break, thin and ideographic spaces.
            if n == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a BOM is no text (nor -DOCSTART-'s)
            cols = [c.decode("utf-8") for c in raw.split()]
            if not cols or cols[0] == DOCSTART:
                flush()
                continue
            if has_tags is None:
                has_tags = len(cols) > 1
            if has_tags:
                if len(cols) < 2 or not -len(cols) <= tag_column < len(cols):
                    raise FormatError(
                        f"{path}:{n}: {len(cols)} columns, cannot take tag column "
                        f"{tag_column} (config.data.tag_column); earlier lines have tags"
                    )
                tags.append(cols[tag_column])
            if not words:
                start = n
            words.append(cols[0])
    flush()
    if not sentences:
        raise FormatError(
            f"{path} holds no sentences: expected one `word ... tag` line per token "
            "and a blank line between sentences"
        )
    return sentences


def label_set(sentences: Sequence[TaggedSentence]) -> tuple[str, ...]:
    """The tags seen in a training file, sorted, "O" first (the usual id 0)."""
    seen = {t for s in sentences for t in (s.tags or ())}
    if not seen:
        raise FormatError("the training file has no tag column")
    return tuple(sorted(seen, key=lambda t: (t != "O", t)))


def write_predictions(
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
