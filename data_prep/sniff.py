"""What an input file holds, decided by its first bytes, never by its name alone: names lie (a dump
saved as .txt, a .gz that is not gzip), and a binary file read as text gives records of garbage
and a zero exit. What is read, and what is refused with an InputError saying what to do:
docs/data_prep.md, "Input".
"""

import bz2
import dataclasses
import gzip
import json
import re
import zlib
from typing import BinaryIO

from bert_jax import cli

MAX_LINE_BYTES = 8 << 20  # a longer "line" is binary junk or a file without newlines: skipped
HEAD_BYTES = 1 << 16  # bytes sniffed (decompressed bytes for gzip and bz2)
_BZ2_READ_LIMIT = 1 << 21  # a bz2 block is at most 900 kB of text: its first ~2 MB give output
_MAX_BAD_FRACTION = 0.25  # of sniffed characters undecodable: more is not UTF-8 text (Latin-1
# prose has a few percent: read, those bytes dropped and counted; Cyrillic in cp1251 has most)
_MIN_BAD = 16  # and at least this many: a few stray bytes in a tiny file are not an encoding
_MAX_STRAY_NULS = 2  # NUL bytes a UTF-8 text may hold (and at most 1 in 1000 bytes)
_MIN_BAD_LINES = 8  # lines with undecodable bytes that, being most lines, mean another encoding

GZIP_MAGIC = b"\x1f\x8b"
BZ2_MAGIC = b"BZh"
PARQUET_MAGIC = b"PAR1"
UTF8_BOM = b"\xef\xbb\xbf"
_REPLACEMENT = "\ufffd".encode()  # U+FFFD written in UTF-8
# Formats people have corpora in that are not read here: named, with what to do, instead of the
# generic "holds NUL bytes".
_UNREAD_FORMATS = (
    (b"\xfd7zXZ\x00", "is xz-compressed: decompress it (unxz) or recompress it with gzip"),
    (b"\x28\xb5\x2f\xfd", "is zstd-compressed: decompress it (zstd -d) or recompress it with gzip"),
    (b"7z\xbc\xaf\x27\x1c", "is a 7-Zip archive: extract it (7z x) and pass the files inside"),
    (b"PK\x03\x04", "is a zip archive: extract it (unzip) and pass the files inside"),
)
# A multistream dump's index: offset:page_id:title lines.
_MULTISTREAM_INDEX_LINE = re.compile(rb"\d+:\d+:.+")
# What may stand before an XML document's root element: the declaration, processing
# instructions, comments, a DOCTYPE (with an internal subset), whitespace.
_XML_PROLOG = re.compile(rb"\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)", re.S)
_WIDE_BOMS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class NotText(cli.UserError):
    """Bytes that are not UTF-8 text; the message, a clause after the file's name, says what they
    look like and what to do."""


@dataclasses.dataclass(frozen=True)
class Content:
    kind: str  # "text" | "jsonl" | "wiki" | "parquet" | "index" (a multistream dump's index)
    compression: str = ""  # "" | "gzip" | "bz2"
    # A dump's encoding when it is not UTF-8 ("utf-16", "utf-32"): expat reads it, told by the
    # byte-order mark or the declaration, but only from the start (one sequential unit).
    encoding: str = ""


def _bunzip_head(f: BinaryIO) -> bytes:
    decompressor, out = bz2.BZ2Decompressor(), b""
    read = 0
    while len(out) < 1024 and read < _BZ2_READ_LIMIT and not decompressor.eof:
        chunk = f.read(1 << 16)
        if not chunk:
            # The file ends inside its first stream: a cut download, whose head (a bz2 block
            # gives nothing until it is whole) cannot say what it holds.
            raise NotText(
                "is bz2-compressed but ends inside its first bz2 stream (truncated or damaged): "
                "fetch or decompress it again"
            )
        read += len(chunk)
        try:
            out += decompressor.decompress(chunk)
        except OSError as e:
            raise NotText(f"starts like bz2 but is not valid bz2 data ({e})") from None
    return out


def check_text(head: bytes) -> None:
    """Raises NotText unless `head` (a file's first bytes, decompressed) reads as UTF-8 text."""
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom):
            raise NotText(
                f"is {name} text (byte-order mark {bom.hex()}): convert it to UTF-8, e.g. "
                f"iconv -f {name} -t UTF-8"
            )
    nuls = head.count(b"\x00")
    # UTF-16/32 without a mark has a NUL for every ASCII character (newlines, spaces), binary data
    # has them throughout; a stray U+0000 in UTF-8 text is read, and dropped by the tokenizers as
    # by the original's _clean_text.
    if nuls > _MAX_STRAY_NULS and nuls * 1000 > len(head):
        raise NotText(
            "holds NUL bytes (binary data, or UTF-16/32 text without a byte-order mark): "
            "pass UTF-8 text"
        )
    text = head.decode("utf-8", errors="replace")
    if len(head) == HEAD_BYTES:  # the sniffed head may end inside a character
        text = text.rstrip("\ufffd")
    # A U+FFFD the text holds (its bytes EF BF BD: text decoded with replacement before it came
    # here, common in web crawls) is UTF-8 like any other character, not a byte that does not
    # decode; the original reads it, and its tokenizer drops it.
    bad = text.count("\ufffd") - head.count(_REPLACEMENT)
    if bad >= _MIN_BAD and bad > _MAX_BAD_FRACTION * len(text):
        raise NotText(
            f"is not UTF-8 text: {bad} of its first {len(text)} characters do not decode (another "
            "encoding, or binary data); convert it to UTF-8 (iconv -f ENCODING -t UTF-8)"
        )
    # Latin-1 prose has few bad characters but on most lines: every accented word would lose a
    # letter. A few bad lines in UTF-8 text are repaired and counted (ReadStats.bad_utf8_lines).
    lines = [(line, raw) for line, raw in zip(text.split("\n"), head.split(b"\n")) if line.strip()]
    bad_lines = sum(line.count("\ufffd") > raw.count(_REPLACEMENT) for line, raw in lines)
    if bad_lines >= _MIN_BAD_LINES and 2 * bad_lines > len(lines):
        raise NotText(
            f"is not UTF-8 text: {bad_lines} of its first {len(lines)} lines hold bytes that do "
            "not decode (Latin-1 or Windows-1252 text?); convert it to UTF-8 (iconv -f LATIN1 "
            "-t UTF-8)"
        )


def _root(head: bytes) -> bytes | None:
    """The start of an XML document's root element ("<mediawiki ..."), None if not XML."""
    start = head.lstrip(UTF8_BOM).lstrip()
    if not start.startswith(b"<?xml"):
        return start if start.startswith(b"<mediawiki") else None
    position = 0
    while match := _XML_PROLOG.match(start, position):
        position = match.end()
    return start[position:].lstrip()


# How an XML document in UTF-16/32 starts: its byte-order mark, or without one the NULs around
# its first `<` (as the XML spec's appendix F detects the encoding).
_WIDE_XML_STARTS = tuple((bom, name.lower()) for bom, name in _WIDE_BOMS) + (
    (b"<\x00\x00\x00", "utf-32-le"),
    (b"\x00\x00\x00<", "utf-32-be"),
    (b"<\x00", "utf-16-le"),
    (b"\x00<", "utf-16-be"),
)


def as_utf8(head: bytes) -> tuple[bytes, str]:
    """(the head as UTF-8 bytes, its encoding: "" for UTF-8, else a UTF-16/32 codec name), for
    finding an XML root, or a dump's <siteinfo> (data_prep/wiki.py), in a dump written in UTF-16
    or UTF-32."""
    codec = next((codec for start, codec in _WIDE_XML_STARTS if head.startswith(start)), None)
    if codec is None:
        return head, ""
    text = head.decode(codec, errors="ignore")  # the head may end inside a character
    return text.encode("utf-8"), codec[:6]  # "utf-16" / "utf-32", whatever the byte order


def _wiki(compression: str, encoding: str) -> Content:
    """A MediaWiki dump's Content; UTF-32 (which expat does not read) is refused with the
    command that converts it."""
    if encoding == "utf-32":
        unpack = {"bz2": "bunzip2 -c FILE | ", "gzip": "gunzip -c FILE | "}.get(compression, "")
        raise NotText(
            "is a MediaWiki XML dump in UTF-32, which the XML parser does not read: convert it "
            f"with `{unpack}iconv -f UTF-32 -t UTF-8 {'' if unpack else 'FILE '}> dump.xml` and "
            'change its XML declaration to encoding="UTF-8"'
        )
    return Content("wiki", compression, encoding)


def sniff(f: BinaryIO) -> Content:
    """The content of an open binary file (read from its current position, which is its start)."""
    head = f.read(HEAD_BYTES)
    if head.startswith(PARQUET_MAGIC):
        return Content("parquet")
    if head.startswith(BZ2_MAGIC):
        f.seek(0)
        unzipped = _bunzip_head(f)
        xml, encoding = as_utf8(unzipped)
        if (_root(xml) or b"").startswith(b"<mediawiki"):
            return _wiki("bz2", encoding)
        lines = unzipped.split(b"\n")[:-1][:10]  # whole lines only
        if lines and all(_MULTISTREAM_INDEX_LINE.fullmatch(line) for line in lines):
            return Content("index", "bz2")
        raise NotText(
            "is bz2-compressed but not a MediaWiki XML dump: decompress it (bunzip2) or "
            "recompress it with gzip"
        )
    compression = ""
    if head.startswith(GZIP_MAGIC):
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, HEAD_BYTES)
        except zlib.error as e:
            raise NotText(f"starts like gzip but is not valid gzip data ({e})") from None
        compression = "gzip"
    xml, encoding = as_utf8(head)
    root = _root(xml)
    if root is not None and root.startswith(b"<mediawiki"):
        return _wiki(compression, encoding)
    if root is not None:
        element = re.match(rb"<([^\s/>]{1,40})", root)
        name = element.group(1).decode("utf-8", "replace") if element else "?"
        raise NotText(
            f"is an XML file but not a MediaWiki export (its root element is <{name}>, not "
            "<mediawiki>): pass a Wikipedia dump (pages-articles .xml or .xml.bz2) or plain text"
        )
    for magic, said in _UNREAD_FORMATS:
        if head.startswith(magic):
            raise NotText(said)
    check_text(head)
    if b"\n" not in head and len(head) == HEAD_BYTES:
        # One line as long as the file: the readers skip a line over MAX_LINE_BYTES (and count
        # it), so it would read as no text after minutes. Say so now (a first line that ends
        # within a megabyte past the limit is skipped, and the lines after it read).
        f.seek(0)
        stream = gzip.GzipFile(fileobj=f, mode="rb") if compression == "gzip" else f
        first = stream.readline(MAX_LINE_BYTES + (1 << 20))
        if len(first) > MAX_LINE_BYTES and not first.endswith(b"\n"):
            raise NotText(
                f"has no line break in its first {MAX_LINE_BYTES >> 20} MB: a line over the "
                f"{MAX_LINE_BYTES >> 20} MB limit is skipped, so it would give no text; break it "
                "into lines (one sentence a line, a blank line between documents)"
            )
        # A first line longer than the head (a JSON record of a long article) is judged whole;
        # one that ends the file without a line break is a whole line too.
        head = first if first.endswith(b"\n") else first + b"\n"
    return Content("jsonl" if _is_json_lines(head) else "text", compression)


def _is_json_lines(head: bytes) -> bool:
    """JSON lines, whatever the file's name: most of its first whole lines (up to 5) are JSON
    objects (a piece cut out of a larger file, `split -b`, starts inside a record)."""
    # A byte-order mark (Windows tools write one) is dropped, as the readers drop it.
    lines = [line for line in head.removeprefix(UTF8_BOM).split(b"\n")[:-1] if line.strip()][:5]
    objects = sum(line.lstrip().startswith(b"{") and _is_json_object(line) for line in lines)
    return objects * 2 > len(lines)


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):  # RecursionError: nested past the interpreter's limit
        return False
