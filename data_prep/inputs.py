"""What every input reader shares: a source, a unit's statistics, the input error, opening a file
(local or in a bucket) and reading its lines. It imports no reader: the import graph is a tree.
"""

import dataclasses
import gzip
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from bert_jax import cli, storage
from data_prep import sniff

MAX_LINE_BYTES = sniff.MAX_LINE_BYTES  # a longer line is skipped (and counted)
READ_AHEAD = 1 << 20  # bytes a bucket object is read ahead of the reader (open_input)
TEXT_FIELD = "text"  # --text_field's default


@dataclasses.dataclass
class ReadStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    # Lines with bytes not UTF-8 (or escaped half surrogates): U+FFFD, which tokenizers drop.
    bad_utf8_lines: int = 0
    bad_json_lines: int = 0  # JSONL lines that are not JSON objects with the text field; skipped
    long_lines: int = 0  # lines over MAX_LINE_BYTES; skipped
    empty_files: int = 0
    pages: int = 0  # pages of MediaWiki dumps
    skipped_pages: int = 0  # of which not articles: other namespaces, redirects, disambiguation
    # Sentences of dump articles that removed markup (math, a list, templates) left broken:
    repaired_sentences: int = 0  # a leading "," taken off
    dropped_sentences: int = 0  # lost words that cannot be put back (data_prep/wikitext.py)

    def add(self, other) -> None:  # InstanceStats' too: every field summed
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
    """An input that names nothing readable."""


def open_input(path: str) -> BinaryIO:
    """An input file's bytes, with seek (a bucket's read ahead: docs/data_prep.md, "Buckets")."""
    if storage.is_url(path):
        return storage.open_read(path, block_size=READ_AHEAD)
    return open(path, "rb")


def open_text(f: BinaryIO, path: str) -> BinaryIO:
    """A text file's bytes, gunzipped when its first bytes say gzip (whatever its name)."""
    position = f.tell()
    magic = f.read(2)
    f.seek(position)
    return gzip.GzipFile(fileobj=f, mode="rb") if magic == sniff.GZIP_MAGIC else f


def truncated(path: str, error: Exception) -> InputError:
    return InputError(
        f"input {path!r} is damaged or truncated ({type(error).__name__}: {error}); "
        "fetch or decompress it again"
    )


def raw_lines(f: BinaryIO, path: str) -> Iterator[tuple[bytes | None, int]]:
    """(line bytes, length) of a binary stream; None for a line over MAX_LINE_BYTES."""
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


def decode_line(raw: bytes | None, stats: ReadStats, drop_cr: bool = False) -> str:
    """A raw line as stripped text; undecodable bytes become U+FFFD, counted; an over-long line
    (None) is counted and read as "". drop_cr: every "\\r" is dropped, as the original's GFile
    reads them ("a\\rb" is "ab"); elsewhere a "\\r" is whitespace to the tokenizers."""
    if raw is None:
        stats.long_lines += 1
        return ""
    if drop_cr:
        raw = raw.replace(b"\r", b"")
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        stats.bad_utf8_lines += 1
        return raw.decode("utf-8", errors="replace").strip()


def read_lines(
    path: str, stats: ReadStats, drop_cr: bool = False, bom_line: bool = False
) -> Iterator[str]:
    """Stripped lines of a file, ending at "\\n" only, as the original's GFile (an over-long line
    is ""); drop_cr: as decode_line's; a starting byte-order mark is dropped. bom_line: a first
    line of the mark alone is "\\ufeff", as the original reads it, so no document ends there."""
    stats.files += 1
    empty = True
    with open_input(path) as raw_file, open_text(raw_file, path) as f:
        for raw, _ in raw_lines(f, path):
            marked = False
            if empty and raw is not None:
                marked = raw.startswith(sniff.UTF8_BOM)
                raw = raw.removeprefix(sniff.UTF8_BOM)
            empty = False
            stats.lines += 1
            line = decode_line(raw, stats, drop_cr)
            if bom_line and marked and not line:
                line = "\ufeff"
            if drop_cr and raw is not None and not raw.endswith(b"\n") and not raw.strip(b"\r"):
                continue  # a last line of "\r"s alone is the file's end to GFile.readline
            if line or raw is not None:
                yield line
    if empty:
        stats.empty_files += 1
