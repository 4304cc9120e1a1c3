"""What an input file holds, decided by its first bytes, never by its name alone (names lie): what
is read, and what is refused saying what to do: docs/data_prep.md, "Input".
"""

import bz2
import dataclasses
import gzip
import json
import re
import zlib
from typing import BinaryIO
from xml.parsers import expat

from bert_jax import cli

MAX_LINE_BYTES = 8 << 20  # a longer "line" is binary junk or a file without newlines: skipped
HEAD_BYTES = 1 << 16  # bytes sniffed (decompressed bytes for gzip and bz2)
_BZ2_READ_LIMIT = 1 << 21  # a bz2 block is at most 900 kB of text: its first ~2 MB give output
_MAX_BAD_FRACTION = 0.25  # of sniffed characters undecodable: more is another encoding
_MIN_BAD = 16  # and at least this many: a few stray bytes in a tiny file are not an encoding
_MAX_STRAY_NULS = 2  # NUL bytes a UTF-8 text may hold (and at most 1 in 1000 bytes)
_MIN_BAD_LINES = 8  # lines with undecodable bytes that, being most lines, mean another encoding

GZIP_MAGIC = b"\x1f\x8b"
BZ2_MAGIC = b"BZh"
PARQUET_MAGIC = b"PAR1"
UTF8_BOM = b"\xef\xbb\xbf"
_REPLACEMENT = "\ufffd".encode()  # U+FFFD written in UTF-8
# Formats not read here: named, with what to do, instead of the generic "holds NUL bytes".
_UNREAD_FORMATS = (
    (b"\xfd7zXZ\x00", "is xz-compressed: decompress it (unxz) or recompress it with gzip"),
    (b"\x28\xb5\x2f\xfd", "is zstd-compressed: decompress it (zstd -d) or recompress it with gzip"),
    (b"7z\xbc\xaf\x27\x1c", "is a 7-Zip archive: extract it (7z x) and pass the files inside"),
    (b"PK\x03\x04", "is a zip archive: extract it (unzip) and pass the files inside"),
)
_MULTISTREAM_INDEX_LINE = re.compile(rb"\d+:\d+:.+")
# What may stand before an XML document's root element.
_XML_PROLOG = re.compile(rb"\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)", re.S)
# An XML declaration, and the encoding it names (group 1).
_XML_DECLARATION = re.compile(rb"<\?xml\b[^>]*?encoding\s*=\s*[\"']([^\"']*)[\"'][^>]*\?>")
_WIDE_BOMS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


class NotText(cli.UserError):
    """Bytes that are not UTF-8 text; the message is a clause after the file's name."""


@dataclasses.dataclass(frozen=True)
class Content:
    kind: str  # "text" | "jsonl" | "wiki" | "parquet" | "index" (a multistream dump's index)
    compression: str = ""  # "" | "gzip" | "bz2"
    # A dump's encoding when not UTF-8 ("utf-16"): expat reads it from the start only (one unit).
    encoding: str = ""


def _bunzip_head(f: BinaryIO) -> bytes:
    decompressor, out = bz2.BZ2Decompressor(), b""
    read = 0
    while len(out) < 1024 and read < _BZ2_READ_LIMIT and not decompressor.eof:
        chunk = f.read(1 << 16)
        if not chunk:
            # A cut download: a bz2 block gives nothing until it is whole.
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
    # UTF-16/32 without a mark and binary data have NULs throughout; a stray one in UTF-8 text
    # is read (the tokenizers drop it).
    if nuls > _MAX_STRAY_NULS and nuls * 1000 > len(head):
        raise NotText(
            "holds NUL bytes (binary data, or UTF-16/32 text without a byte-order mark): "
            "pass UTF-8 text"
        )
    text = head.decode("utf-8", errors="replace")
    if len(head) == HEAD_BYTES:  # the sniffed head may end inside a character
        text = text.rstrip("\ufffd")
    # A U+FFFD the text holds (common in web crawls) is UTF-8, not a byte that does not decode.
    bad = text.count("\ufffd") - head.count(_REPLACEMENT)
    if bad >= _MIN_BAD and bad > _MAX_BAD_FRACTION * len(text):
        raise NotText(
            f"is not UTF-8 text: {bad} of its first {len(text)} characters do not decode (another "
            "encoding, or binary data); convert it to UTF-8 (iconv -f ENCODING -t UTF-8)"
        )
    # Latin-1 prose has few bad characters but on most lines (a few bad lines are repaired).
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
    position = 0
    while match := _XML_PROLOG.match(start, position):
        position = match.end()
    root = start[position:].lstrip()
    # Without a declaration, only <mediawiki> makes a file XML: text may start with a comment.
    return root if start.startswith(b"<?xml") or root.startswith(b"<mediawiki") else None


# How an XML document in UTF-16/32 starts: a byte-order mark, or NULs around its first `<`.
_WIDE_XML_STARTS = tuple((bom, name.lower()) for bom, name in _WIDE_BOMS) + (
    (b"<\x00\x00\x00", "utf-32-le"),
    (b"\x00\x00\x00<", "utf-32-be"),
    (b"<\x00", "utf-16-le"),
    (b"\x00<", "utf-16-be"),
)


def as_utf8(head: bytes) -> tuple[bytes, str]:
    """(the head as UTF-8 bytes, its encoding: "" for UTF-8, else "utf-16" or "utf-32")."""
    codec = next((codec for start, codec in _WIDE_XML_STARTS if head.startswith(start)), None)
    if codec is None:
        return head, ""
    text = head.decode(codec, errors="ignore")  # the head may end inside a character
    return text.encode("utf-8"), codec[:6]  # "utf-16" / "utf-32", whatever the byte order


def _wiki(compression: str, encoding: str, xml: bytes) -> Content:
    """A MediaWiki dump's Content; encodings expat does not read (UTF-32, multi-byte ones but
    UTF-8 and UTF-16, unknown names) are refused, with the command that converts them."""
    unread = "UTF-32" if encoding == "utf-32" else None
    declaration = _XML_DECLARATION.match(xml.lstrip(UTF8_BOM).lstrip())
    if declaration and not encoding:
        name = declaration.group(1).decode("ascii", "replace")
        try:
            expat.ParserCreate().Parse(declaration.group() + b"<a/>", True)
        except LookupError:
            raise NotText(
                f"is a MediaWiki XML dump whose declaration names an unknown encoding, {name!r}: "
                'correct it (encoding="UTF-8" for a UTF-8 file)'
            ) from None
        except ValueError:  # "multi-byte encodings are not supported"
            unread = name
        except expat.ExpatError:
            pass  # a malformed declaration: the dump's parse names it
    if unread:
        unpack = {"bz2": "bunzip2 -c FILE | ", "gzip": "gunzip -c FILE | "}.get(compression, "")
        raise NotText(
            f"is a MediaWiki XML dump in {unread}, which the XML parser does not read: convert it "
            f"with `{unpack}iconv -f {unread} -t UTF-8 {'' if unpack else 'FILE '}> dump.xml` and "
            'change its XML declaration to encoding="UTF-8"'
        )
    return Content("wiki", compression, encoding)


def sniff(f: BinaryIO) -> Content:
    """The content of a binary file open at its start."""
    head = f.read(HEAD_BYTES)
    if head.startswith(PARQUET_MAGIC):
        return Content("parquet")
    if head.startswith(BZ2_MAGIC):
        f.seek(0)
        unzipped = _bunzip_head(f)
        xml, encoding = as_utf8(unzipped)
        if (_root(xml) or b"").startswith(b"<mediawiki"):
            return _wiki("bz2", encoding, xml)
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
        return _wiki(compression, encoding, xml)
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
        # One line as long as the file would read as no text (a line over the limit is skipped).
        f.seek(0)
        stream = gzip.GzipFile(fileobj=f, mode="rb") if compression == "gzip" else f
        first = stream.readline(MAX_LINE_BYTES + (1 << 20))
        if len(first) > MAX_LINE_BYTES and not first.endswith(b"\n"):
            raise NotText(
                f"has no line break in its first {MAX_LINE_BYTES >> 20} MB: a line over the "
                f"{MAX_LINE_BYTES >> 20} MB limit is skipped, so it would give no text; break it "
                "into lines (one sentence a line, a blank line between documents)"
            )
        # A first line longer than the head (a JSON record of a long article) is judged whole.
        head = first if first.endswith(b"\n") else first + b"\n"
    return Content("jsonl" if _is_json_lines(head) else "text", compression)


def _is_json_lines(head: bytes) -> bool:
    """JSON lines, whatever the file's name: most of its first whole lines (up to 5) are JSON
    objects (a piece cut by `split -b` starts inside a record)."""
    lines = [line for line in head.removeprefix(UTF8_BOM).split(b"\n")[:-1] if line.strip()][:5]
    objects = sum(line.lstrip().startswith(b"{") and _is_json_object(line) for line in lines)
    return objects * 2 > len(lines)


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):  # nested past the interpreter's limit
        return False
