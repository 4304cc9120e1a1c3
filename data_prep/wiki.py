"""MediaWiki XML dumps -> articles -> documents; multistream dumps -> work units of whole bz2
streams at their index's offsets. How a dump is streamed, planned and split by its own language,
and which pages are articles: docs/data_prep.md, "Wikipedia dumps".
"""

import bisect
import bz2
import dataclasses
import gzip
import os
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import storage
from data_prep import inputs, sniff, wikitext
from data_prep.sentences import DEFAULT_LANGUAGE, language_code

_READ = 1 << 20  # compressed bytes read at a time
_MULTISTREAM_PART = re.compile(
    r"(?P<stem>.*-multistream)(?P<part>\d+)\.xml(?P<pages>-p\d+p\d+)\.bz2"
)
_REDIRECT = "#redirect"
_BZ2_STREAM_START = re.compile(rb"BZh[1-9]")  # every bz2 stream's header, where an index points
_SITEINFO_END = b"</siteinfo>"
_STAND_IN_ROOT = b"<mediawiki>"  # a unit inside a dump is parsed under it
_HEAD_LIMIT = 1 << 20  # decompressed bytes searched for </siteinfo>; a real one ends in a few KB
# Where a dump names its wiki's language: <dbname>, <base>, <mediawiki xml:lang=...>.
_SISTER_PROJECTS = rb"wiktionary|wikibooks|wikinews|wikiquote|wikisource|wikiversity|wikivoyage"
_DBNAME = re.compile(rb"<dbname>\s*([a-z_]+?)(?:wiki|" + _SISTER_PROJECTS + rb")\s*</dbname>")
_BASE = re.compile(rb"<base>\s*https?://([a-z-]+)\.(?:wikipedia|" + _SISTER_PROJECTS + rb")\.org")
# xml:lang looked for in each tag: one regex over the head was quadratic (1 MB: minutes).
_MEDIAWIKI_TAG = re.compile(rb"<mediawiki\b[^>]*")
_XML_LANG = re.compile(rb"\sxml:lang=[\"']([A-Za-z-]+)")
# MediaWiki's canonical English namespace names, for exports with neither <ns> nor <siteinfo>.
_DEFAULT_NAMESPACES = dict(
    item.split(":")[::-1]
    for item in (
        "-2:media,-1:special,1:talk,2:user,3:user talk,4:wikipedia,5:wikipedia talk,6:file,"
        "6:image,7:file talk,7:image talk,8:mediawiki,9:mediawiki talk,10:template,"
        "11:template talk,12:help,13:help talk,14:category,15:category talk,100:portal,"
        "101:portal talk,118:draft,119:draft talk,828:module,829:module talk"
    ).split(",")
)


@dataclasses.dataclass(frozen=True)
class Page:
    title: str
    namespace: str
    redirect: bool
    text: str


def index_path(dump_path: str) -> str | None:
    """Where the multistream index of a dump lies, by the dumps' naming (X.xml.bz2 ->
    X-index.txt.bz2, and for parts ...-multistream-index3.txt-p1p2.bz2); None for no .xml.bz2."""
    part = _MULTISTREAM_PART.fullmatch(dump_path)
    if part:
        return f"{part['stem']}-index{part['part']}.txt{part['pages']}.bz2"
    if not dump_path.endswith(".xml.bz2"):
        return None
    return dump_path[: -len(".xml.bz2")] + "-index.txt.bz2"


def stream_offsets(path: str, open_binary: Callable[[str], BinaryIO]) -> tuple[list[int], int]:
    """The distinct stream offsets an index lists, ascending, and the index's size in bytes."""
    offsets: list[int] = []
    tail = b""
    with open_binary(path) as f:
        for text in _bz2_chunks(f, 0, None, path, "index"):
            lines = (tail + text).split(b"\n")
            tail = lines.pop()
            for line in lines:
                _add_offset(offsets, line, path)
        size = f.tell()
    _add_offset(offsets, tail, path)
    return offsets, size


def _add_offset(offsets: list[int], line: bytes, path: str) -> None:
    if not line.strip():
        return
    head = line.split(b":", 1)[0]
    if not head.isdigit():
        raise inputs.InputError(
            f"multistream index {path!r}: line {line[:80]!r} is not offset:page_id:title"
        )
    offset = int(head)
    if not offsets or offset > offsets[-1]:
        offsets.append(offset)
    elif offset < offsets[-1]:
        raise inputs.InputError(f"multistream index {path!r}: offsets go backwards at {offset}")


def plan(source: inputs.Source, planning) -> list[tuple[int, int, dict]]:
    """(start, stop, {"extent"}) of a dump's units: byte ranges of about planning.block_bytes."""
    size = storage.size(source.path)
    # A UTF-16/32 dump is read from its start only: expat learns the encoding there.
    index = index_path(source.path) if source.compression == "bz2" and not source.encoding else None
    try:
        offsets, index_size = stream_offsets(index, inputs.open_input) if index else ([], 0)
    except FileNotFoundError:  # no index beside the dump: one sequential unit
        offsets, index_size = [], 0
    except OSError as e:  # one there that cannot be read: the user expects it used
        raise inputs.InputError(
            f"multistream index {index!r} of {source.path!r} cannot be read "
            f"({type(e).__name__}: {e.strerror or e}); make it a readable file, or remove it to "
            "read the dump as one sequential unit"
        ) from None
    if not offsets:
        return [(0, size, {"extent": f"{size} bytes, no index"})]
    if offsets[-1] >= size:
        within = offsets[: bisect.bisect_left(offsets, size)]
        if not within:
            raise inputs.InputError(
                f"multistream index {index!r} lists offset {offsets[-1]} but {source.path!r} has "
                f"only {size} bytes: the index belongs to another dump"
            )
        # Streams where the index has them: the dump is cut short, not the index wrong.
        with inputs.open_input(source.path) as f:
            _check_stream_start(f, within[-1], source.path)
        raise inputs.truncated(
            source.path,
            EOFError(f"its index lists streams up to offset {offsets[-1]}, past its {size} bytes"),
        )
    starts = [0, *offsets] if offsets[0] else offsets
    spans, unit_start = [], 0
    for start, stop in zip(starts, [*starts[1:], size]):
        if start > unit_start and stop - unit_start > planning.block_bytes:
            spans.append((unit_start, start))
            unit_start = start
    spans.append((unit_start, size))
    extent = f"{size} bytes, index {index_size} bytes"
    return [(start, stop, {"extent": extent}) for start, stop in spans]


def _bz2_chunks(
    f: BinaryIO,
    start: int,
    stop: int | None,
    path: str,
    what: str = "dump",
    streams: list[tuple[int, int]] | None = None,
) -> Iterator[bytes]:
    """Decompressed bytes of the bz2 streams in [start, stop) (None: to the end); an InputError
    when they end inside one. `streams` gets (byte offset, lines yielded before) of each."""
    f.seek(start)
    remaining = float("inf") if stop is None else stop - start
    decompressor, pending, read_to, lines = bz2.BZ2Decompressor(), True, start, 0
    if streams is not None:
        streams.append((start, 0))
    while remaining > 0:
        data = f.read(min(_READ, remaining))
        if not data:
            break
        remaining -= len(data)
        read_to += len(data)
        while data:
            if decompressor.eof:
                decompressor = bz2.BZ2Decompressor()
                if streams is not None:
                    streams.append((read_to - len(data), lines))
            try:
                out = decompressor.decompress(data)
            except OSError as e:
                raise inputs.truncated(path, e) from None
            pending = not decompressor.eof
            if out:
                lines += out.count(b"\n") if streams is not None else 0
                yield out
            data = decompressor.unused_data if decompressor.eof else b""
    if pending or (stop is not None and remaining > 0):
        raise inputs.truncated(path, EOFError(f"the {what} ends inside a bz2 stream"))


def chunks(
    f: BinaryIO, compression: str, start: int, stop: int, path: str, size: int = _READ
) -> Iterator[bytes]:
    """The XML bytes of a dump's [start, stop) (gzip and plain: all from where `f` is)."""
    if compression == "bz2":
        yield from _bz2_chunks(f, start, stop, path)
        return
    stream = gzip.GzipFile(fileobj=f, mode="rb") if compression == "gzip" else f
    try:
        yield from iter(lambda: stream.read(size), b"")
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise inputs.truncated(path, e) from None


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _page(element, namespaces: dict[str, str]) -> Page:
    """A <page> element as a Page. Exports before schema 0.5 have no <ns>: a title's "Prefix:"
    names it, by <siteinfo>'s `namespaces` (or MediaWiki's English names)."""
    title, namespace = element.findtext("{*}title", ""), element.findtext("{*}ns")
    if namespace is not None:
        namespace = namespace.strip()
    else:
        prefix, colon, _ = title.partition(":")
        names = namespaces or _DEFAULT_NAMESPACES
        namespace = names.get(prefix.strip().lower(), "0") if colon else "0"
    return Page(
        title,
        namespace,
        element.find("{*}redirect") is not None,
        element.findtext("{*}revision/{*}text", ""),
    )


def pages(
    chunks: Iterator[bytes],
    path: str,
    inside_root: bool,
    whole: bool = False,
    streams: list[tuple[int, int]] | None = None,
) -> Iterator[Page]:
    """The pages of an XML export's bytes; `inside_root`: they start after <mediawiki>; `whole`:
    they are the whole file, which must end with </mediawiki> (a cut no decompressor notices).
    `streams`: their bz2 streams (`_bz2_chunks`), for an error to name where it lies."""
    parser = ET.XMLPullParser(events=("start", "end"))
    root, namespaces, page, revision = None, {}, None, None
    if inside_root:
        parser.feed(_STAND_IN_ROOT)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            for event, element in parser.read_events():
                if root is None:
                    root = element
                elif event == "start":
                    if _local(element.tag) == "page":
                        page, revision = element, None
                elif _local(element.tag) == "revision" and page is not None:
                    # Full-history dumps: only the latest revision is kept in memory.
                    if revision is not None:
                        page.remove(revision)
                    revision = element
                elif _local(element.tag) == "siteinfo":  # names, lower-cased -> keys
                    namespaces = {
                        (name.text or "").strip().lower(): name.get("key")
                        for name in element.iterfind(".//{*}namespace")
                        if name.get("key") is not None
                    }
                elif _local(element.tag) == "page":
                    page = revision = None
                    yield _page(element, namespaces)
            if root is not None:
                root.clear()  # finished pages are yielded: the tree keeps none of them
        if whole:
            try:
                parser.close()
            except ET.ParseError:
                raise inputs.truncated(
                    path, EOFError("the XML export ends before its </mediawiki>")
                ) from None
    except ET.ParseError as e:
        raise inputs.InputError(
            f"input {path!r} is not a well-formed MediaWiki XML export ({_where(e, streams)})"
        ) from None


def _where(error: ET.ParseError, streams: list[tuple[int, int]] | None) -> str:
    """The parser's message, for bytes of a dump's bz2 streams with its line in its stream and that
    stream's byte offset (expat counts lines from where the unit started)."""
    if not streams:
        return str(error)
    line, column = error.position
    if line == 1:
        column -= len(_STAND_IN_ROOT)  # fed before the unit's first line
    offset, before = streams[bisect.bisect_right(streams, line - 1, key=lambda s: s[1]) - 1]
    message = str(error).rpartition(": line ")[0]
    return (
        f"{message}: line {line - before}, column {column} of the bz2 stream at byte offset "
        f"{offset}, `tail -c +{offset + 1} DUMP | bzip2 -dc` shows it"
    )


def article(
    page: Page, language: str = DEFAULT_LANGUAGE, stats: inputs.ReadStats | None = None
) -> list[str]:
    """An article's sentences; [] for pages that are not articles or hold no prose."""
    if page.namespace != "0" or page.redirect or page.text[:9].lower().startswith(_REDIRECT):
        return []
    if wikitext.is_disambiguation(page.title, page.text):
        return []
    prose = wikitext.prose(page.text, language)
    if stats is not None:
        stats.repaired_sentences += prose.repaired
        stats.dropped_sentences += prose.dropped
    return [sentence for paragraph in prose.paragraphs for sentence in paragraph]


def site_language(head: bytes) -> str | None:
    """The language a dump's head (its bytes up to </siteinfo>) names, or None."""
    for find in (_DBNAME.search, _BASE.search, _xml_lang):
        found = find(head)
        if found:
            try:
                return language_code(found.group(1).decode())
            except ValueError:
                continue  # "commonswiki", "metawiki": not a language; try the next place
    return None


def _xml_lang(head: bytes) -> re.Match | None:
    """The last xml:lang attribute of the first <mediawiki> tag that has one."""
    for tag in _MEDIAWIKI_TAG.finditer(head):
        found = list(_XML_LANG.finditer(tag.group()))
        if found:
            return found[-1]
    return None


def _head(f: BinaryIO, compression: str, path: str) -> bytes:
    """A dump's first bytes, decompressed and as UTF-8, up to its </siteinfo> (or _HEAD_LIMIT)."""
    f.seek(0)
    head = b""

    def done() -> bool:
        return _SITEINFO_END in sniff.as_utf8(head)[0] or len(head) >= _HEAD_LIMIT

    if compression == "bz2":  # the first stream: a multistream dump's holds only the siteinfo
        decompressor = bz2.BZ2Decompressor()
        for block in iter(lambda: f.read(1 << 16), b""):
            try:
                head += decompressor.decompress(block, _HEAD_LIMIT - len(head))
            except OSError as e:
                raise inputs.truncated(path, e) from None
            if decompressor.eof or done():
                break
    else:
        for block in chunks(f, compression, 0, 0, path, size=1 << 16):
            head += block
            if done():
                break
    return sniff.as_utf8(head)[0]


def _check_stream_start(f: BinaryIO, offset: int, path: str) -> None:
    """Raises an error naming the index unless a bz2 stream starts at `offset`, which it lists."""
    f.seek(offset)
    if not _BZ2_STREAM_START.match(f.read(4)):
        raise inputs.InputError(
            f"multistream index {index_path(path)!r} lists offset {offset}, where no bz2 stream of "
            f"{path!r} starts: the index belongs to another dump; put the dump's own index "
            "beside it, or remove the index to read the dump as one unit"
        )


def read_unit(unit, stats: inputs.ReadStats, reading) -> Iterator[list[str]]:
    """A unit's articles, split into sentences by the dump's language (or reading.language)."""
    path, compression, start = unit.path, unit.compression, unit.start
    with reading.open_binary(path) as f:
        language = site_language(_head(f, compression, path)) or reading.language
        size = f.seek(0, os.SEEK_END)
        whole = start == 0 and unit.stop >= size
        for offset in sorted({start, unit.stop} - {0, size}):  # the index offsets it is cut at
            _check_stream_start(f, offset, path)
        f.seek(start)
        streams = [] if compression == "bz2" and start > 0 else None
        if streams is None:
            xml = chunks(f, compression, start, unit.stop, path)
        else:
            xml = _bz2_chunks(f, start, unit.stop, path, streams=streams)
        for page in pages(xml, path, start > 0, whole, streams):
            stats.pages += 1
            sentences = article(page, language, stats)
            if sentences:
                stats.documents += 1
                yield sentences
            else:
                stats.skipped_pages += 1
