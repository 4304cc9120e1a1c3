"""Line-based inputs, a unit (a byte block) at a time: BERT-format text, books (a file one
document) and JSONL. A text document belongs to the block that holds its anchor, the blank line
before it: a unit skips the tail of a document anchored earlier and reads past its block's end to
finish its last one. A JSONL block: the lines that start in it. A gzip file or a book: one unit.
"""

import itertools
import json
import re
from collections.abc import Iterator
from typing import BinaryIO

from bert_jax import storage
from data_prep import inputs, sniff
from data_prep.inputs import ReadStats, decode_line, open_text, raw_lines
from data_prep.sentences import DEFAULT_LANGUAGE, split_sentences

_SURROGATE = re.compile("[\ud800-\udfff]")


def plan(source, planning) -> list[tuple[int, int, dict]]:
    """(start, stop, {}) byte blocks of a file; one for a compressed file or a book."""
    size, block = storage.size(source.path), planning.block_bytes
    if source.compression or source.kind == "book" or size == 0:
        return [(0, size, {})]
    return [(start, min(start + block, size), {}) for start in range(0, size, block)]


def text_documents(lines: Iterator[str], stats: ReadStats) -> Iterator[list[str]]:
    for nonblank, group in itertools.groupby(lines, key=bool):
        if nonblank:
            document = list(group)
            stats.documents += 1
            yield document


def json_document(
    line: str, text_field: str, stats: ReadStats, language: str = DEFAULT_LANGUAGE
) -> list[str]:
    """The sentences of one stripped JSONL line; [] for a blank, empty or bad (counted) one."""
    line = line.removeprefix("\ufeff")  # files concatenated with their byte-order marks
    if not line:
        return []
    try:
        record = json.loads(line)
        text = record[text_field]
        if not isinstance(text, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):  # Recursion: nested too deep
        stats.bad_json_lines += 1
        return []
    if _SURROGATE.search(text):  # an escaped half pair ("\\ud800"): no UTF-8 encoder takes it
        stats.bad_utf8_lines += 1
        text = _SURROGATE.sub("\ufffd", text)
    return split_sentences(text, language)


def _seek_to_line(f: BinaryIO, start: int) -> int:
    """Positions f at the first line that starts at or after `start`; returns that offset."""
    if start == 0:
        return 0
    f.seek(start - 1)
    offset = start - 1
    while True:  # the rest of the line holding byte start-1, in bounded pieces
        piece = f.readline(inputs.MAX_LINE_BYTES)
        offset += len(piece)
        if not piece or piece.endswith(b"\n"):
            return offset


def _lines(f: BinaryIO, unit) -> Iterator[tuple[bytes | None, bool]]:
    """A unit's raw lines (a file's BOM dropped), each with whether it starts past the block."""
    stop = float("inf") if unit.compression else unit.stop
    offset = _seek_to_line(f, unit.start)
    for raw, length in raw_lines(f, unit.path):
        if offset == 0 and raw:
            raw = raw.removeprefix(sniff.UTF8_BOM)
        yield raw, offset >= stop
        offset += length


def text_unit(f: BinaryIO, unit, stats: ReadStats, reading) -> Iterator[list[str]]:
    anchored = unit.start == 0  # the previous line was blank (or this is the file start)
    document: list[str] = []
    elsewhere = ReadStats()  # lines of another block are counted there, not here
    for raw, past_block in _lines(f, unit):
        counted = elsewhere if past_block else stats
        counted.lines += 1
        line = decode_line(raw, counted, drop_cr=True)
        if raw is None:
            continue  # an over-long line, skipped: as if it were not there
        if not line:
            if document:
                stats.documents += 1
                yield document
                document = []
            if past_block:
                return  # a document after this blank line is anchored in a later block
            anchored = True
        elif document:
            document.append(line)
        elif anchored:
            document = [line]
            anchored = False
        elif past_block:
            return
        # else: the tail of a document anchored in an earlier block
    if document:
        stats.documents += 1
        yield document


def jsonl_unit(f: BinaryIO, unit, stats: ReadStats, reading) -> Iterator[list[str]]:
    text_field, language = reading.text_field, reading.language
    for raw, past_block in _lines(f, unit):
        if past_block:
            return
        stats.lines += 1
        line = decode_line(raw, stats)
        sentences = json_document(line, text_field, stats, language)
        if sentences:
            stats.documents += 1
            yield sentences


def book_unit(f: BinaryIO, unit, stats: ReadStats, reading) -> Iterator[list[str]]:
    """All lines of a file as one document, each line a paragraph split into sentences."""
    document = []
    for raw, _ in _lines(f, unit):
        stats.lines += 1
        line = decode_line(raw, stats)
        if line:
            document += split_sentences(line, reading.language)
    if document:
        stats.documents += 1
        yield document


def opened(read):
    """A unit reader from `read(f, unit, stats, reading)`: the file opened, gunzipped if gzip."""

    def read_unit(unit, stats: ReadStats, reading) -> Iterator[list[str]]:
        lines_before = stats.lines
        with reading.open_binary(unit.path) as raw_file, open_text(raw_file, unit.path) as f:
            yield from read(f, unit, stats, reading)
        if unit.compression and stats.lines == lines_before:
            stats.empty_files += 1  # an empty file compressed: its size is not 0

    return read_unit
