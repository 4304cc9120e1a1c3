"""Corpora -> documents (lists of sentence strings).

Three sources, chosen per input by `parse_input`:
  * BERT-format text: one sentence per line, a blank line between documents; plain or .gz; files and
    globs.
  * JSONL (.jsonl/.json, plain or .gz): one JSON object per line with a text field; its text is
    split into paragraphs at newlines and into sentences by `split_sentences`.
  * TFDS datasets, written `tfds:NAME[:SPLIT]` (e.g. `tfds:wikipedia/20230601.en:train`), read with
    `tfds.data_source` (no TensorFlow needed; the dataset must be prepared in ArrayRecord format).

Readers never raise on bad text: undecodable bytes are replaced (and the tokenizer drops them), and
every such line, empty document and unreadable JSON line is counted in `ReadStats` for the job's
summary.
"""

import dataclasses
import glob
import gzip
import json
import os
import re
from collections.abc import Iterator


@dataclasses.dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    bad_utf8_lines: int = 0  # lines with bytes that are not UTF-8; those bytes are dropped
    bad_json_lines: int = 0  # JSONL lines that are not JSON objects with the text field; skipped
    empty_files: int = 0

    def add(self, other: "ReadStats") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclasses.dataclass(frozen=True)
class Source:
    kind: str  # "text" | "jsonl" | "tfds"
    path: str  # a file path, or the TFDS dataset name
    split: str = "train"


class InputError(ValueError):
    """An input that names nothing readable; the message says what to fix."""


def _is_jsonl(path: str) -> bool:
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith((".jsonl", ".json"))


def _match_local(spec: str) -> list[str]:
    paths = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(f"input {path!r} is not a readable file")
    return paths


def parse_input(specs: list[str], match=_match_local) -> list[Source]:
    """Expands files, globs and `tfds:` names into sources, in a stable order (globs sorted).

    `match(spec)` lists the files a file spec names; the default reads the local filesystem (the
    Beam job passes one that also knows gs:// and other remote filesystems).
    """
    sources = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if spec.startswith("tfds:"):
            name, _, split = spec[len("tfds:") :].partition(":")
            sources.append(Source("tfds", name, split or "train"))
            continue
        paths = match(spec)
        if not paths:
            raise InputError(f"--input pattern {spec!r} matches no file")
        for path in paths:
            sources.append(Source("jsonl" if _is_jsonl(path) else "text", path))
    if not sources:
        raise InputError("no input given: pass --input=FILE[,GLOB,tfds:NAME:SPLIT]")
    return sources


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def decode_line(raw: bytes, stats: ReadStats) -> str:
    """A raw line as stripped text; undecodable bytes become U+FFFD (which tokenizers drop),
    counted."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.bad_utf8_lines += 1
        line = raw.decode("utf-8", errors="replace")
    return line.strip()


def read_lines(path: str, stats: ReadStats) -> Iterator[str]:
    """Stripped lines of a file. Lines end at "\\n" only, as TensorFlow's GFile (the original's
    reader)."""
    stats.files += 1
    empty = True
    with _open(path) as f:
        for raw in f:
            empty = False
            stats.lines += 1
            yield decode_line(raw, stats)
    if empty:
        stats.empty_files += 1


def text_documents(lines: Iterator[str], stats: ReadStats) -> Iterator[list[str]]:
    """Groups BERT-format lines into documents at blank lines."""
    document: list[str] = []
    for line in lines:
        if line:
            document.append(line)
        elif document:
            stats.documents += 1
            yield document
            document = []
    if document:
        stats.documents += 1
        yield document


# A sentence ends at . ! or ? (plus closing quotes/brackets) followed by space and an upper-case
# letter, digit or opening quote. Plain rules, no model to download; good enough for Wikipedia-style
# prose, and BERT only needs sentence boundaries for NSP pairs, not perfect ones.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATIONS = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|No|Fig|Vol|Inc|Ltd|Co)\.$"
)


def split_sentences(text: str) -> list[str]:
    """Paragraphs at newlines, then sentences; keeps common abbreviations ("Dr. Smith") together."""
    sentences = []
    for paragraph in text.split("\n"):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        start = 0
        for match in _SENTENCE_END.finditer(paragraph):
            candidate = paragraph[start : match.start()].strip()
            if _ABBREVIATIONS.search(candidate) or re.search(r"\b[A-Z]\.$", candidate):
                continue  # "Dr." or an initial: not the end of a sentence
            sentences.append(paragraph[start : match.end()].strip())
            start = match.end()
        tail = paragraph[start:].strip()
        if tail:
            sentences.append(tail)
    return sentences


def json_document(line: str, text_field: str, stats: ReadStats) -> list[str]:
    """The sentences of one stripped JSONL line; [] for a blank line, empty text or a bad line
    (counted)."""
    if not line:
        return []
    try:
        record = json.loads(line)
        text = record[text_field]
        if not isinstance(text, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        stats.bad_json_lines += 1
        return []
    return split_sentences(text)


def jsonl_documents(path: str, text_field: str, stats: ReadStats) -> Iterator[list[str]]:
    for line in read_lines(path, stats):
        sentences = json_document(line, text_field, stats)
        if sentences:
            stats.documents += 1
            yield sentences


def open_tfds(name: str, split: str, data_dir: str | None):
    """A random-access TFDS data source (len() and indexing), or an InputError that says what to
    do."""
    import tensorflow_datasets as tfds

    try:
        return tfds.data_source(name, split=split, data_dir=data_dir)
    except Exception as e:  # tfds raises many types for "not prepared" / "unknown name"
        raise InputError(
            f"cannot open TFDS dataset {name!r} split {split!r}: {e}. "
            "Prepare it first in ArrayRecord "
            f"format (`tfds build {name} --file_format=array_record`) and pass --tfds_data_dir"
        ) from e


def tfds_documents(
    name: str,
    split: str,
    text_field: str,
    data_dir: str | None,
    stats: ReadStats,
    start: int = 0,
    stop: int | None = None,
) -> Iterator[list[str]]:
    """Documents of examples [start, stop) of a TFDS split (all by default); the first range counts
    the file."""
    source = open_tfds(name, split, data_dir)
    if start == 0:
        stats.files += 1
    for index in range(start, len(source) if stop is None else min(stop, len(source))):
        example = source[index]
        if text_field not in example:
            raise InputError(
                f"TFDS dataset {name!r} has no field {text_field!r}; fields: {sorted(example)}; "
                "set --text_field"
            )
        text = example[text_field]
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
        sentences = split_sentences(text)
        if sentences:
            stats.documents += 1
            yield sentences


def documents(
    source: Source, stats: ReadStats, text_field: str = "text", tfds_data_dir: str | None = None
):
    """The documents of one source."""
    if source.kind == "text":
        return text_documents(read_lines(source.path, stats), stats)
    if source.kind == "jsonl":
        return jsonl_documents(source.path, text_field, stats)
    return tfds_documents(source.path, source.split, text_field, tfds_data_dir, stats)
