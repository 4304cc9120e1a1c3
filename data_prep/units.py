"""Work units of the scaled job: the inputs cut into pieces that are read independently.

A unit is a byte block of a text or JSONL file, a whole gzip file (gzip cannot seek) or book, a run
of whole bz2 streams of a multistream Wikipedia dump (data_prep/wiki.py), a run of row groups of a
Parquet file (data_prep/parquet.py), or an index range of a TFDS split. Units are planned from the
inputs alone (their content kinds, sizes, a dump's index, a Parquet footer, and the block size), so
they, and every random choice seeded from them, are the same whatever the number of workers.

Text blocks: a document belongs to the block that holds its anchor, the blank line just before it
(a file's first document is anchored at byte 0). A unit seeks to its block, skips the tail of a
document anchored earlier, and reads on past the block end until its last document ends. So every
document is read by exactly one unit, and together the units give the documents of reading the file
from start to end; every line is counted by the unit whose block holds its first byte.
JSONL blocks: the lines that start inside the block, one document each.
"""

import dataclasses
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import cli, storage
from data_prep import parquet, readers, sniff, wiki
from data_prep.sentences import DEFAULT_LANGUAGE

MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Unit:
    index: int  # position in the plan; part of every random seed of the unit
    kind: str  # "text" | "book" | "jsonl" | "wiki" | "parquet" | "tfds"
    path: str  # a file, or a TFDS dataset name
    start: int  # first byte (files), row group (Parquet) or example (TFDS)
    stop: int  # one past the last; a gzip file is one unit, start=0, stop=its size
    split: str = ""  # TFDS split
    first: bool = True  # the first unit of its source: it counts the file (and an empty one)
    compression: str = ""  # "" | "gzip" | "bz2": from the file's content, not its name
    weight: int = 0  # compressed bytes of Parquet row groups (their start/stop count groups)
    extent: str = ""  # what the plan saw of a dump or Parquet file, for the job's fingerprint

    @property
    def size(self) -> int:
        """Work estimate for progress and scheduling: bytes of a file block (of row groups for
        Parquet), examples of a TFDS range."""
        return self.weight or self.stop - self.start


def plan_units(
    sources: list[readers.Source],
    block_bytes: int,
    tfds_examples_per_unit: int,
    tfds_data_dir: str | None = None,
    size_of: Callable[[str], int] = storage.size,
    open_binary: Callable[[str], BinaryIO] = readers.open_input,
    text_field: str = "text",
) -> list[Unit]:
    """Cuts every source into units, in source order; depends on nothing but the inputs."""
    if block_bytes < 1 or tfds_examples_per_unit < 1:
        raise cli.UserError(
            f"block size {block_bytes} bytes and tfds_examples_per_unit="
            f"{tfds_examples_per_unit} must be positive"
        )
    units: list[Unit] = []

    def add(source, start, stop, **kwargs):
        units.append(
            Unit(
                len(units),
                source.kind,
                source.path,
                start,
                stop,
                first=start == 0,
                compression=source.compression,
                **kwargs,
            )
        )

    for source in sources:
        if source.kind == "tfds":
            count = len(readers.open_tfds(source.path, source.split, tfds_data_dir))
            for start in range(0, max(count, 1), tfds_examples_per_unit):
                stop = min(start + tfds_examples_per_unit, count)
                add(source, start, stop, split=source.split)
            continue
        if source.kind == "parquet":
            spans, extent = parquet.plan(source.path, block_bytes, text_field, open_binary)
            for start, stop, weight in spans:
                add(source, start, stop, weight=weight, extent=extent)
            continue
        size = size_of(source.path)
        if source.kind == "wiki":
            spans, extent = wiki.plan(source, size, block_bytes, open_binary)
            for start, stop in spans:
                add(source, start, stop, extent=extent)
        elif source.compression or source.kind == "book" or size == 0:
            add(source, 0, size)
        else:
            for start in range(0, size, block_bytes):
                add(source, start, min(start + block_bytes, size))
    return units


def _seek_to_line(f: BinaryIO, start: int) -> int:
    """Positions f at the first line that starts at or after `start`; returns that offset."""
    if start == 0:
        return 0
    f.seek(start - 1)
    offset = start - 1
    while True:  # the rest of the line holding byte start-1, in bounded pieces
        piece = f.readline(readers.MAX_LINE_BYTES)
        offset += len(piece)
        if not piece or piece.endswith(b"\n"):
            return offset


def _lines(f: BinaryIO, unit: Unit) -> Iterator[tuple[bytes | None, int]]:
    """A unit's raw lines (and lengths) from its first line on; a file's BOM is dropped."""
    lines = readers.raw_lines(f, unit.path)
    if unit.start == 0:
        for raw, length in lines:
            yield (raw.removeprefix(sniff.UTF8_BOM) if raw else raw), length
            break
    yield from lines


def _text_documents(f: BinaryIO, unit: Unit, stats: readers.ReadStats) -> Iterator[list[str]]:
    stop = float("inf") if unit.compression else unit.stop
    offset = _seek_to_line(f, unit.start)
    anchored = unit.start == 0  # the previous line was blank (or this is the file start)
    document: list[str] = []
    elsewhere = readers.ReadStats()  # lines of another block are counted there, not here
    for raw, length in _lines(f, unit):
        line_start, offset = offset, offset + length
        counted = stats if line_start < stop else elsewhere
        counted.lines += 1
        line = readers.decode_line(raw, counted)
        if raw is None:
            continue  # an over-long line, skipped: as if it were not there
        if not line:
            if document:
                stats.documents += 1
                yield document
                document = []
            if line_start >= stop:
                return  # a document after this blank line is anchored in a later block
            anchored = True
        elif document:
            document.append(line)
        elif anchored:
            document = [line]
            anchored = False
        elif line_start >= stop:
            return
        # else: the tail of a document anchored in an earlier block
    if document:
        stats.documents += 1
        yield document


def _jsonl_documents(
    f: BinaryIO, unit: Unit, text_field: str, stats: readers.ReadStats, language: str
) -> Iterator[list[str]]:
    stop = float("inf") if unit.compression else unit.stop
    offset = _seek_to_line(f, unit.start)
    for raw, length in _lines(f, unit):
        if offset >= stop:
            return
        offset += length
        stats.lines += 1
        line = readers.decode_line(raw, stats)
        sentences = readers.json_document(line, text_field, stats, language)
        if sentences:
            stats.documents += 1
            yield sentences


def _decoded(lines, stats: readers.ReadStats) -> Iterator[str]:
    for raw, _ in lines:
        stats.lines += 1
        yield readers.decode_line(raw, stats)


def read_unit(
    unit: Unit,
    stats: readers.ReadStats,
    text_field: str = "text",
    tfds_data_dir: str | None = None,
    open_binary: Callable[[str], BinaryIO] = readers.open_input,
    language: str = DEFAULT_LANGUAGE,
) -> Iterator[list[str]]:
    """The documents (lists of sentence strings) of one unit, running text split into sentences
    by `language`'s rules; `open_binary` opens a path for reading with seek (default: local files
    and bucket objects, readers.open_input; the content hash passes one that hashes what is
    read)."""
    if unit.kind == "tfds":
        yield from readers.tfds_documents(
            unit.path, unit.split, text_field, tfds_data_dir, stats, unit.start, unit.stop, language
        )
        return
    if unit.first:
        stats.files += 1
        if unit.stop == 0:
            stats.empty_files += 1
            return
    if unit.kind == "wiki":
        yield from wiki.documents(
            unit.path, unit.compression, unit.start, unit.stop, stats, open_binary, language
        )
        return
    if unit.kind == "parquet":
        yield from parquet.documents(
            unit.path, unit.start, unit.stop, text_field, stats, open_binary, language
        )
        return
    lines_before = stats.lines
    with open_binary(unit.path) as raw_file, readers.open_text(raw_file, unit.path) as f:
        if unit.kind == "jsonl":
            yield from _jsonl_documents(f, unit, text_field, stats, language)
        elif unit.kind == "book":
            yield from readers.book_document(_decoded(_lines(f, unit), stats), stats, language)
        else:
            yield from _text_documents(f, unit, stats)
    if unit.compression and stats.lines == lines_before:
        stats.empty_files += 1  # an empty file compressed: its size is not 0
