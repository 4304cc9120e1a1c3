"""GLUE-style TSV files -> text examples, and predictions back to TSV (docs/finetuning.md).

A `Layout` per task names its columns: by header, or by position in CoLA's headerless files.
Label lists keep run_classifier.py's order; fields split on tabs only (quotes are text).
"""

import dataclasses
import os
from collections.abc import Sequence

from bert_jax import cli, storage
from bert_jax.finetune.encode import FormatError


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One classification/regression example; `label` is None in files without labels."""

    guid: str  # the file's index column, or "<file stem>-<line number>"
    text_a: str
    text_b: str | None
    label: str | None
    line: int | None = dataclasses.field(default=None, compare=False)  # where it is in its file


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a GLUE task's TSV keeps its texts and label."""

    text_a: str  # header name of the first text
    text_b: str | None  # header name of the second text (sentence pairs)
    label: str  # header name of the label / score
    labels: tuple[str, ...]  # label names in id order; () for regression
    guid: str | None = "index"  # header name of an id column, if any
    # Headerless files (CoLA train/dev): column positions of (text_a, label).
    positional: tuple[int, int] | None = None


LAYOUTS = {
    "sst2": Layout("sentence", None, "label", ("0", "1")),
    "cola": Layout("sentence", None, "label", ("0", "1"), positional=(3, 1)),
    "mrpc": Layout("#1 String", "#2 String", "Quality", ("0", "1")),
    "mnli": Layout(
        "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral")
    ),
    "stsb": Layout("sentence1", "sentence2", "score", ()),
    "qqp": Layout("question1", "question2", "is_duplicate", ("0", "1"), guid="id"),
    "qnli": Layout("question", "sentence", "label", ("entailment", "not_entailment")),
    "rte": Layout("sentence1", "sentence2", "label", ("entailment", "not_entailment")),
    "wnli": Layout("sentence1", "sentence2", "label", ("0", "1")),
}


def get_layout(name: str) -> Layout:
    if not isinstance(name, str) or name not in LAYOUTS:
        raise cli.UserError(
            f"unknown GLUE layout {name!r}; choose one of {sorted(LAYOUTS)} (config.data.layout)"
        )
    return LAYOUTS[name]


def read_tsv(path: str, layout: Layout) -> list[TextExample]:
    storage.check_file(path, "data file")
    with storage.open_read(path, "rb") as f:
        text = f.read().decode("utf-8-sig")  # -sig: tolerate a BOM
    # Lines end at "\n" (or "\r\n") only: a lone "\r" in a field (a spreadsheet cell's) is text.
    rows = [line.removesuffix("\r").split("\t") for line in text.split("\n")]
    if rows[-1] == [""]:
        rows.pop()  # the file's last line break
    if not rows:
        raise FormatError(f"{path} is empty")
    stem = os.path.splitext(os.path.basename(path))[0]
    header = rows[0]
    name = next(name for name, value in LAYOUTS.items() if value == layout)
    if layout.text_a in header:  # columns by name; data from line 2
        col = {column: i for i, column in enumerate(header)}
        if layout.text_b is not None and layout.text_b not in col:
            raise FormatError(
                f"{path}: the header has no column {layout.text_b!r}; a "
                f"{name} file needs {layout.text_a!r} and {layout.text_b!r}"
            )
        rows, first = rows[1:], 2
        short = f"tab-separated fields, the header promises {len(header)}; fix or delete this line"
    elif layout.positional is None:
        raise FormatError(
            f"{path}: the first line has no column {layout.text_a!r} (header "
            f"{header[:6]}...); is this a {name} file?"
        )
    else:  # headerless: columns by position; data from line 1
        text_i, label_i = layout.positional
        col, first = {layout.text_a: text_i, layout.label: label_i}, 1
        short = (
            f"fields; a headerless {name} file has the text in column {text_i} and the label in "
            f"column {label_i}"
        )
    has_label = layout.label in col
    # Every column a row is read from, the id column too (it may come after the texts).
    needed = max(
        col[c] for c in (layout.text_a, layout.text_b, layout.label, layout.guid) if c in col
    )
    out = []
    for n, row in enumerate(rows, start=first):
        if row == [""]:
            continue  # a trailing blank line
        if len(row) <= needed:
            raise FormatError(f"{path}:{n}: {len(row)} {short}")
        guid = row[col[layout.guid]] if layout.guid in col else f"{stem}-{n}"
        label = row[col[layout.label]] if has_label else None
        if label is not None and label != label.strip():  # "1 " is not "1": say so, with the line
            raise FormatError(
                f"{path}:{n}: label {label!r} has spaces around it; remove them (labels are "
                "matched exactly against config.data.labels or the layout's label set)"
            )
        text_b = row[col[layout.text_b]] if layout.text_b else None
        out.append(TextExample(guid, row[col[layout.text_a]], text_b, label, n))
    return out


def write_predictions(path: str, examples: Sequence[TextExample], predictions: Sequence) -> None:
    """GLUE submission format: a header `index<TAB>prediction`, then one line per example."""
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} examples but {len(predictions)} predictions")
    storage.makedirs(storage.dirname(path))
    with storage.open_write(path, "w") as f:
        f.write("index\tprediction\n")
        for example, pred in zip(examples, predictions):
            value = f"{pred:.4f}" if isinstance(pred, float) else str(pred)
            f.write(f"{example.guid}\t{value}\n")
