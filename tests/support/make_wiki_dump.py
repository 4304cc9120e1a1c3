r"""Builds MediaWiki dumps for tests, benchmarks and the README example, with their expected text.

  python -m tests.support.make_wiki_dump --output=/tmp/gen --articles=120
  python -m tests.support.make_wiki_dump --from_dump=enwiki-sample.xml.bz2 \
      --output=examples/data/enwiki-sample --max_page_bytes=25000 --pages_per_stream=10

writes `wiki-pages-articles-multistream.xml.bz2` and `wiki-pages-articles-multistream-index.txt.bz2`
in the real export schema (export-0.11: <siteinfo>, <page> with <title>, <ns>, <id>, <redirect>,
<revision> with <text xml:space="preserve">): bz2 streams of --pages_per_stream pages
concatenated, the first holding only <mediawiki> and <siteinfo>, and the index's
`offset:page_id:title` lines, as Wikimedia's multistream dumps are laid out.

Articles are made of prose sentences wrapped in the constructs real pages use: an infobox with
nested templates, references (named, self-closing, with citation templates inside), wiki tables,
galleries, file links whose captions hold links, interlanguage links, categories, comments, HTML
tags and entities, bold and italics, headings, lists, external links, magic words, inline
templates that render words ({{convert}}, {{lang}}, {{as of}}, {{IPAc-en}}, {{chem}}, {{angbr}}),
hard-wrapped lines, and sentences that lose words with their markup (a list's introduction, a
sentence holding <math>), which the reader drops. Redirects, disambiguation pages and pages of
other namespaces are mixed in. `build` returns each article's expected sentences, so tests can
check the reader's output exactly.

--parquet_output also writes the articles as the Hugging Face hub's `wikimedia/wikipedia` Parquet
files are laid out (columns id, url, title, text; paragraphs separated by blank lines).

--from_dump repacks the pages of an existing dump (plain, bz2, multistream or not) instead: the
README's example (examples/data/enwiki-sample-*) is real Wikipedia pages repacked so, and
bench/wiki_bench.py repacks a real dump (--repeat times) to time and measure the reader.
"""

import bz2
import os
import random
import re
from xml.sax.saxutils import escape, quoteattr

from absl import app, flags

NAMESPACE = "http://www.mediawiki.org/xml/export-0.11/"
HEADER = f"""<mediawiki xmlns="{NAMESPACE}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="{NAMESPACE} http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" \
xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.43.0-wmf.1</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
FOOTER = "</mediawiki>\n"

_PLACES = ["river", "valley", "harbour", "castle", "bridge", "village", "island", "forest"]
_VERBS = ["was built", "was settled", "was described", "was rebuilt", "was mapped", "was named"]
_TIMES = ["in the early years", "during the long winter", "after the great flood", "by the monks"]


def _sentences(i: int, rng: random.Random, count: int) -> list[tuple[str, str]]:
    """(wikitext, expected text) of prose sentences; each names its article ("article 12")."""
    out = []
    for k in range(count):
        place, verb, time = rng.choice(_PLACES), rng.choice(_VERBS), rng.choice(_TIMES)
        kind = k % 8
        if kind == 0:
            wiki = f"The [[{place.title()}|{place}]] of article {i} {verb} {time}."
            text = f"The {place} of article {i} {verb} {time}."
        elif kind == 1:
            wiki = f"In {1800 + k} the '''{place}''' of article {i} {verb} ''{time}''."
            text = f"In {1800 + k} the {place} of article {i} {verb} {time}."
        elif kind == 2:
            wiki = (
                f"Its length of {{{{convert|{k + 3}|km}}}} made the {place} of article {i} "
                f"famous, as [[Dr. Smith]] noted.<ref>{{{{cite book|title=On {place}s|"
                f"year=19{k % 90 + 10}}}}}</ref>"
            )
            text = (
                f"Its length of {k + 3} kilometres made the {place} of article {i} famous, as "
                "Dr. Smith noted."
            )
        elif kind == 3:
            wiki = (
                f"Visitors&nbsp;call the {place} of article {i} "
                f'{{{{lang|fr|la belle {place}}}}} <!-- a comment -->today.<ref name="n{k}" />'
            )
            text = f"Visitors call the {place} of article {i} la belle {place} today."
        elif kind == 5:  # hard-wrapped: a single newline inside a paragraph is a space
            wiki = f"The {place} of article {i}\n{verb} {time}."
            text = f"The {place} of article {i} {verb} {time}."
        elif kind == 6:
            wiki = f"{{{{As of|{2000 + k}|5}}}}, the {place} of article {i} {verb}."
            text = f"As of May {2000 + k}, the {place} of article {i} {verb}."
        elif kind == 7:
            wiki = (
                f"The {place} of article {i} ({{{{IPAc-en|ˈ|p|l|eɪ|s}}}}) holds "
                f"{{{{chem|H|2|O}}}} and {{{{angbr|{place[0]}}}}} {time}."
            )
            text = f"The {place} of article {i} (/ˈpleɪs/) holds H2O and ⟨{place[0]}⟩ {time}."
        else:
            wiki = (
                f'The <span class="x">old</span> {place} of article {i} is 2.5 km long '
                f"(see [https://example.org/{i} the survey] and [[:Category:Places|places]])."
            )
            text = f"The old {place} of article {i} is 2.5 km long (see the survey and places)."
        out.append((wiki, text))
    return out


def article(i: int, rng: random.Random) -> tuple[str, str, list[str]]:
    """(title, wikitext, expected sentences) of article i."""
    title = f"Article {i}"
    lead = _sentences(i, rng, rng.randint(2, 4))
    body = _sentences(i, rng, rng.randint(2, 6))
    wiki = [
        "{{Short description|A place}}{{Use dmy dates|date=May 2020}}",
        "{{Infobox settlement\n| name = " + title + "\n| population = {{formatnum:1234}}"
        "\n| coordinates = {{coord|51|N|0|W|display=inline}}\n| image = [[File:X.jpg|200px]]\n}}",
        "__NOTOC__",
        " ".join(w for w, _ in lead),
        "[[File:Example view.jpg|thumb|left|A view of the [[harbour]] in {{circa|1900}}.]]",
        f"== History of article {i} ==",
        " ".join(w for w, _ in body[: len(body) // 2]),
        '{| class="wikitable"\n|-\n! Year !! Event\n|-\n| 1900 || {{flag|France}} founded\n|}',
        "=== Later years ===",
        " ".join(w for w, _ in body[len(body) // 2 :]),
        "<gallery>\nFile:A.jpg|A caption with [[a link]]\nFile:B.jpg\n</gallery>",
        "* a list item about [[something]]\n* another item",
        "<math>x^2 + y^2</math>",
        # Sentences that lose words with their markup: dropped (and counted).
        f"The places of article {i} include:\n* the {rng.choice(_PLACES)}\n* the old town",
        f"Its area is <math>x^2</math> in article {i}.",
        "== See also ==\n* [[Another article]]",
        "== References ==\n{{Reflist}}",
        "== External links ==\n* [https://example.org Official site]",
        "{{Navbox|name=Places|list1=[[A]] · [[B]]}}",
        f"[[Category:Places]]\n[[Category:Article {i}]]\n[[de:Artikel {i}]]\n[[fr:Article {i}]]",
    ]
    expected = [text for _, text in lead] + [text for _, text in body]
    return title, "\n\n".join(wiki), expected


def _page(page_id: int, title: str, text: str, ns: int = 0, redirect: str | None = None) -> str:
    redirect_tag = f"    <redirect title={quoteattr(redirect)} />\n" if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n"
        f"    <id>{page_id}</id>\n{redirect_tag}    <revision>\n"
        f"      <id>{page_id + 100000}</id>\n      <timestamp>2024-01-01T00:00:00Z</timestamp>\n"
        "      <contributor>\n        <username>Example</username>\n        <id>1</id>\n"
        "      </contributor>\n      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
        f'      <text bytes="{len(text.encode())}" xml:space="preserve">{escape(text)}</text>\n'
        "      <sha1>0000000000000000000000000000000</sha1>\n    </revision>\n  </page>\n"
    )


def build(articles: int, seed: int = 0) -> tuple[list[tuple[int, str, str]], dict[str, list]]:
    """Pages (id, title, XML) of `articles` articles with other pages mixed in, and each article
    title's expected sentences."""
    rng = random.Random(seed)
    pages, expected = [], {}

    def add(page_id: int, title: str, text: str, ns: int = 0, redirect: str | None = None):
        pages.append((page_id, title, _page(page_id, title, text, ns, redirect)))

    for i in range(articles):
        title, text, sentences = article(i, rng)
        page_id = 10 * i + 10
        add(page_id, title, text)
        expected[title] = sentences
        if i % 7 == 3:
            add(page_id + 1, f"Art {i}", f"#REDIRECT [[{title}]]", redirect=title)
        if i % 11 == 5:
            dab = f"'''Article {i}''' may refer to:\n* [[{title}]]\n\n{{{{disambiguation}}}}"
            add(page_id + 2, f"Article {i} (disambiguation)", dab)
            place = f"'''Place {i}''' may mean a place of article {i}.\n{{{{Geodis}}}}"
            add(page_id + 3, f"Place {i}", place)
        if i % 13 == 7:
            add(page_id + 4, f"Talk:{title}", "The talk of article.", 1)
            add(page_id + 5, f"Template:Box {i}", "{{{1}}} box.", 10)
    return pages, expected


def write_dump(
    pages,
    path: str,
    pages_per_stream: int = 100,
    multistream: bool = True,
    index: bool = True,
    header: str = HEADER,
) -> str | None:
    """Writes pages as a dump: multistream (header stream, page streams, footer stream) with its
    index, or one bz2 stream, or plain XML (a path not ending in .bz2). Returns the index path.
    `header`: <mediawiki> and <siteinfo> (HEADER: enwiki's)."""
    if not path.endswith(".bz2") or not multistream:
        xml = (header + "".join(x for *_, x in pages) + FOOTER).encode()
        with open(path, "wb") as f:
            f.write(bz2.compress(xml) if path.endswith(".bz2") else xml)
        return None
    lines = []
    with open(path, "wb") as f:
        f.write(bz2.compress(header.encode()))
        for start in range(0, len(pages), pages_per_stream):
            offset = f.tell()
            group = pages[start : start + pages_per_stream]
            lines.extend(f"{offset}:{page_id}:{title}\n" for page_id, title, _ in group)
            f.write(bz2.compress("".join(xml for *_, xml in group).encode()))
        f.write(bz2.compress(FOOTER.encode()))
    if not index:
        return None
    index_path = path[: -len(".xml.bz2")] + "-index.txt.bz2"
    with open(index_path, "wb") as f:
        f.write(bz2.compress("".join(lines).encode()))
    return index_path


_PAGE = re.compile(r"<page>.*?</page>\n?", re.S)
_TITLE = re.compile(r"<title>(.*?)</title>")
_ID = re.compile(r"<id>(\d+)</id>")


def read_pages(path: str, max_page_bytes: int = 0, repeat: int = 1) -> list[tuple[int, str, str]]:
    """(id, title, XML) of an existing dump's pages, each at most max_page_bytes of XML (0: any),
    the whole list `repeat` times (ids kept: the reader does not need them unique)."""
    with (bz2.open if path.endswith(".bz2") else open)(path, "rb") as f:
        xml = f.read().decode("utf-8")
    pages = []
    for match in _PAGE.finditer(xml):
        page = match.group()
        if max_page_bytes and len(page.encode()) > max_page_bytes:
            continue
        page_id = int(_ID.search(page).group(1))
        pages.append((page_id, _TITLE.search(page).group(1), "  " + page.rstrip() + "\n"))
    return pages * repeat


def write_parquet(pages, path: str, row_group_rows: int = 8) -> int:
    """Writes the articles among pages in the schema of Hugging Face's wikimedia/wikipedia
    (id, url, title, text), several row groups; returns the number of rows."""
    import pyarrow
    import pyarrow.parquet as pq

    from data_prep import wiki, wikitext

    xml = (HEADER + "".join(x for *_, x in pages) + FOOTER).encode()
    rows = {"id": [], "url": [], "title": [], "text": []}
    for page_id, page in zip((i for i, *_ in pages), wiki.pages(iter([xml]), path, False)):
        if not wiki.article(page):
            continue
        rows["id"].append(str(page_id))
        rows["url"].append("https://en.wikipedia.org/wiki/" + page.title.replace(" ", "_"))
        rows["title"].append(page.title)
        paragraphs = wikitext.prose(page.text, "en").paragraphs
        rows["text"].append("\n\n".join(" ".join(sentences) for sentences in paragraphs))
    pq.write_table(pyarrow.table(rows), path, row_group_size=row_group_rows)
    return len(rows["id"])


FLAGS = flags.FLAGS


def _define_flags() -> None:
    """Flags only when run as a script: tests and benchmarks import this module beside binaries
    that define flags of the same names (--output, --seed)."""
    flags.DEFINE_string("output", "wiki", "Path prefix: PREFIX-pages-articles-multistream.xml.bz2.")
    flags.DEFINE_integer("articles", 120, "Articles (redirects and other pages are added).")
    flags.DEFINE_integer("pages_per_stream", 20, "Pages per bz2 stream (Wikimedia's dumps: 100).")
    flags.DEFINE_integer("seed", 0, "Seed of the generated text.")
    flags.DEFINE_string(
        "from_dump", None, "Repack this dump's pages instead of generating articles."
    )
    flags.DEFINE_integer("max_page_bytes", 0, "With --from_dump: skip larger pages (0: keep all).")
    flags.DEFINE_integer("repeat", 1, "With --from_dump: the pages this many times over.")
    flags.DEFINE_string("parquet_output", None, "Also write the articles here as HF-style Parquet.")


def main(argv):
    del argv
    if FLAGS.from_dump:
        pages = read_pages(FLAGS.from_dump, FLAGS.max_page_bytes, FLAGS.repeat)
    else:
        pages, _ = build(FLAGS.articles, FLAGS.seed)
    path = f"{FLAGS.output}-pages-articles-multistream.xml.bz2"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    index = write_dump(pages, path, FLAGS.pages_per_stream)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(pages)} pages) and {index}")
    if FLAGS.parquet_output:
        rows = write_parquet(pages, FLAGS.parquet_output)
        size = os.path.getsize(FLAGS.parquet_output)
        print(f"wrote {FLAGS.parquet_output} ({size} bytes, {rows} rows)")


if __name__ == "__main__":
    _define_flags()
    app.run(main)
