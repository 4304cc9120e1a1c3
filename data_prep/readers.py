"""Corpora -> documents (lists of sentence strings).

Sources, chosen per input by `parse_input` from the file's content (data_prep/sniff.py) and name:
  * BERT-format text: one sentence per line, a blank line between documents; plain or gzip; files
    and globs. With document_per_file (BookCorpus-style books: one paragraph or sentence per line,
    no blank-line breaks), each file is one document and its lines are split into sentences.
  * JSONL (.jsonl/.json, plain or gzip): one JSON object per line with a text field; its text is
    split into paragraphs at newlines and into sentences by `sentences.split_sentences`.
  * MediaWiki XML dumps (.xml, .xml.bz2, multistream or not): one article per document
    (data_prep/wiki.py).
  * Parquet files (the Hugging Face hub's format): one row per document, the text field's column
    (data_prep/parquet.py).
  * TFDS datasets, written `tfds:NAME[:SPLIT]` (e.g. `tfds:wikipedia/20230601.en:train`), read with
    `tfds.data_source` (no TensorFlow needed; the dataset must be prepared in ArrayRecord format).

An input that is not UTF-8 text or one of those formats (UTF-16, binary, a bz2 file that is not a
dump) is an InputError naming it, and so is a truncated compressed file. Within text, readers never
raise: undecodable bytes are replaced (and the tokenizer drops them), lines over MAX_LINE_BYTES are
skipped, and every such line, empty document and unreadable JSON line is counted in `ReadStats`.
"""

import dataclasses
import glob
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import cli, storage
from data_prep import sniff
from data_prep.sentences import DEFAULT_LANGUAGE, split_sentences

MAX_LINE_BYTES = sniff.MAX_LINE_BYTES  # a longer line is skipped (and counted)
READ_AHEAD = 1 << 20  # bytes a bucket object is read ahead of the reader (open_input)


@dataclasses.dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    bad_utf8_lines: int = 0  # lines with bytes that are not UTF-8; those bytes are dropped
    bad_json_lines: int = 0  # JSONL lines that are not JSON objects with the text field; skipped
    long_lines: int = 0  # lines over MAX_LINE_BYTES; skipped
    empty_files: int = 0
    pages: int = 0  # pages of MediaWiki dumps
    skipped_pages: int = 0  # of which not articles: other namespaces, redirects, disambiguation
    # Sentences of dump articles that removed markup (math, a list, templates) left broken:
    repaired_sentences: int = 0  # a leading "," taken off
    dropped_sentences: int = 0  # lost words that cannot be put back (data_prep/wikitext.py)

    def add(self, other: "ReadStats") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclasses.dataclass(frozen=True)
class Source:
    kind: str  # "text" | "book" | "jsonl" | "wiki" | "parquet" | "tfds"
    path: str  # a file path, or the TFDS dataset name
    split: str = "train"
    compression: str = ""  # "" | "gzip" | "bz2", from the file's first bytes
    encoding: str = ""  # a dump in UTF-16/32 (sniff.Content.encoding); "" for UTF-8


class InputError(cli.UserError):
    """An input that names nothing readable; the message says what to fix."""


def _is_jsonl(path: str) -> bool:
    name = path[:-3] if path.endswith(".gz") else path
    return name.endswith((".jsonl", ".json"))


def match_files(spec: str) -> list[str]:
    """The files a file spec names: itself, or a glob's matches, sorted; local or in a bucket."""
    paths = storage.glob(spec) if glob.has_magic(spec) else [spec]
    for path in paths:
        try:
            storage.check_file(path, "input")
        except cli.UserError as e:  # storage.check_file: missing, a directory, a pipe
            raise InputError(str(e)) from None
    return paths


def open_input(path: str) -> BinaryIO:
    """An input file's bytes, with seek: a local file by open(), a bucket object through
    bert_jax.storage (a seek to a unit's start fetches from there). Read ahead 1 MB: a unit
    reads a range of about --block_size_mb (pyarrow a row group's exact bytes), and the client's
    default (5 MB past each read) fetched several times what a 1 MB unit needs."""
    if storage.is_url(path):
        return storage.open_read(path, block_size=READ_AHEAD)
    return open(path, "rb")


def source_of(path: str, open_binary=open_input, document_per_file: bool = False) -> Source:
    """The source a file is, by its content (and, for text, by its name: .jsonl/.json)."""
    try:
        with open_binary(path) as f:
            content = sniff.sniff(f)
    except sniff.NotText as e:
        raise InputError(f"input {path!r} {e}") from None
    kind = content.kind
    if kind == "text":  # JSON lines by content (sniff) or by name (a first line that is not JSON)
        kind = "jsonl" if _is_jsonl(path) else "book" if document_per_file else "text"
    return Source(kind, path, compression=content.compression, encoding=content.encoding)


def parse_input(
    specs: list[str],
    match=match_files,
    open_binary: Callable[[str], BinaryIO] = open_input,
    document_per_file: bool = False,
) -> list[Source]:
    """Expands files, globs and `tfds:` names into sources, in a stable order (globs sorted).

    `match(spec)` lists the files a file spec names and `open_binary` opens one; the defaults read
    local files and bucket objects (gs://, s3://) alike.
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
        sources.extend(source_of(path, open_binary, document_per_file) for path in paths)
    sources = _without_dump_indexes(sources)
    if not sources:
        raise InputError("no input given: pass --input=FILE[,GLOB,tfds:NAME:SPLIT]")
    return sources


def _without_dump_indexes(sources: list[Source]) -> list[Source]:
    """A glob over a dump's directory ('enwiki/*.bz2') also names its multistream index: that one
    is the dump's, found beside it by name, and is not read as a corpus. An index without its dump
    among the inputs is an error."""
    from data_prep import wiki  # here, not at the top: wiki imports this module

    indexes_in_use = {wiki.index_path(s.path) for s in sources if s.kind == "wiki"}
    for source in sources:
        if source.kind == "index" and source.path not in indexes_in_use:
            raise InputError(
                f"input {source.path!r} is the index of a multistream Wikipedia dump, not a "
                "corpus: pass the dump itself (...-pages-articles-multistream.xml.bz2); its index "
                "is found beside it by name"
            )
    return [s for s in sources if s.kind != "index"]


def open_text(f: BinaryIO, path: str) -> BinaryIO:
    """A text file's bytes, gunzipped when its first bytes say gzip (whatever its name)."""
    position = f.tell()
    magic = f.read(2)
    f.seek(position)
    return gzip.GzipFile(fileobj=f, mode="rb") if magic == sniff.GZIP_MAGIC else f


def truncated(path: str, error: Exception) -> InputError:
    """The error for a compressed file that ends early or holds damaged data."""
    return InputError(
        f"input {path!r} is damaged or truncated ({type(error).__name__}: {error}); "
        "fetch or decompress it again"
    )


def raw_lines(f: BinaryIO, path: str) -> Iterator[tuple[bytes | None, int]]:
    """(line bytes, length) of a binary stream; None for a line over MAX_LINE_BYTES, read in
    pieces (so memory stays bounded) and skipped. A damaged gzip stream raises InputError."""
    limit = MAX_LINE_BYTES
    try:
        for raw in iter(lambda: f.readline(limit), b""):
            if len(raw) < limit or raw.endswith(b"\n"):
                yield raw, len(raw)
                continue
            length = len(raw)
            while not raw.endswith(b"\n"):
                raw = f.readline(limit)
                if not raw:
                    break
                length += len(raw)
            yield None, length
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise truncated(path, e) from None


def decode_line(raw: bytes | None, stats: ReadStats) -> str:
    """A raw line as stripped text; undecodable bytes become U+FFFD (which tokenizers drop),
    counted; an over-long line (None) is counted and read as ""."""
    if raw is None:
        stats.long_lines += 1
        return ""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.bad_utf8_lines += 1
        line = raw.decode("utf-8", errors="replace")
    return line.strip()


def read_lines(path: str, stats: ReadStats, open_binary=open_input) -> Iterator[str]:
    """Stripped lines of a file (an over-long line is ""). Lines end at "\\n" only, as TensorFlow's
    GFile (the original's reader); a UTF-8 byte-order mark at the start is dropped."""
    stats.files += 1
    empty = True
    with open_binary(path) as raw_file, open_text(raw_file, path) as f:
        for raw, _ in raw_lines(f, path):
            if empty and raw is not None:
                raw = raw.removeprefix(sniff.UTF8_BOM)
            empty = False
            stats.lines += 1
            line = decode_line(raw, stats)
            if line or raw is not None:
                yield line
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


def book_document(
    lines: Iterator[str], stats: ReadStats, language: str = DEFAULT_LANGUAGE
) -> Iterator[list[str]]:
    """All lines of a file as one document, each line a paragraph split into sentences."""
    document = [s for line in lines if line for s in split_sentences(line, language)]
    if document:
        stats.documents += 1
        yield document


def json_document(
    line: str, text_field: str, stats: ReadStats, language: str = DEFAULT_LANGUAGE
) -> list[str]:
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
    return split_sentences(text, language)


def jsonl_documents(
    path: str, text_field: str, stats: ReadStats, language: str = DEFAULT_LANGUAGE
) -> Iterator[list[str]]:
    for line in read_lines(path, stats):
        sentences = json_document(line, text_field, stats, language)
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
    language: str = DEFAULT_LANGUAGE,
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
        sentences = split_sentences(text, language)
        if sentences:
            stats.documents += 1
            yield sentences


def documents(
    source: Source,
    stats: ReadStats,
    text_field: str = "text",
    tfds_data_dir: str | None = None,
    language: str = DEFAULT_LANGUAGE,
):
    """The documents of one whole source; running text is split into sentences by `language`'s
    rules (a dump's own language overrides it)."""
    from data_prep import parquet, wiki  # they build on this module

    if source.kind == "text":
        return text_documents(read_lines(source.path, stats), stats)
    if source.kind == "book":
        return book_document(read_lines(source.path, stats), stats, language)
    if source.kind == "jsonl":
        return jsonl_documents(source.path, text_field, stats, language)
    if source.kind == "wiki":
        return wiki.dump_documents(source, stats, language)
    if source.kind == "parquet":
        return parquet.file_documents(source.path, text_field, stats, language)
    return tfds_documents(
        source.path, source.split, text_field, tfds_data_dir, stats, language=language
    )
