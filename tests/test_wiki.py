"""MediaWiki dumps: every layout and any unit size give the generated articles' exact sentences,
with no markup left; damaged dumps and indexes are errors naming the file."""

import bz2
import gzip
import os
import re
import time
import tracemalloc

import pytest

from data_prep import readers, units, wiki, wikitext
from data_prep.testdata import make_wiki_dump

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "examples", "data", "enwiki-sample-pages-articles-multistream.xml.bz2")
MARKUP = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|</?[a-z]+[ >/]|\{\||\|\}|==|''|&[a-z]+;|__[A-Z]+__")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    pages, expected = make_wiki_dump.build(40)
    d = tmp_path_factory.mktemp("wiki")
    return d, pages, expected


def _read_whole(path):
    stats = readers.ReadStats()
    (source,) = readers.parse_input([str(path)])
    return list(readers.documents(source, stats)), stats, source


def _read_units(path, block_bytes):
    stats = readers.ReadStats()
    planned = units.plan_units(readers.parse_input([str(path)]), block_bytes, 10)
    return [d for u in planned for d in units.read_unit(u, stats)], stats, planned


def test_every_article_exactly_and_nothing_else(generated):
    d, pages, expected = generated
    path = d / "gen-pages-articles-multistream.xml.bz2"
    make_wiki_dump.write_dump(pages, str(path), pages_per_stream=7)
    docs, stats, source = _read_whole(path)
    assert (source.kind, source.compression) == ("wiki", "bz2")
    assert docs == list(expected.values())  # every article, in order, its sentences exactly
    assert stats.pages == len(pages) and stats.skipped_pages == len(pages) - 40
    assert stats.documents == 40 and stats.files == 1
    assert not [s for doc in docs for s in doc if MARKUP.search(s)]


def test_units_at_stream_offsets_give_the_sequential_read(generated):
    d, pages, _ = generated
    path = d / "units-pages-articles-multistream.xml.bz2"
    index = make_wiki_dump.write_dump(pages, str(path), pages_per_stream=5)
    whole, whole_stats, _ = _read_whole(path)
    offsets, _ = wiki.stream_offsets(index, readers.open_input)
    for block in (1, 3000, 20_000, 1 << 30):
        docs, stats, planned = _read_units(path, block)
        assert docs == whole and stats == whole_stats, block
        assert {u.start for u in planned} <= {0, *offsets}
        assert planned[-1].stop == os.path.getsize(path)
    assert len(_read_units(path, 1)[2]) == len(offsets) + 1 > 10  # one unit per stream
    assert len(_read_units(path, 1 << 30)[2]) == 1
    # The parts big wikis are published in, each with its own index, named as Wikimedia names them.
    part = d / "enwiki-20231101-pages-articles-multistream3.xml-p151574p311329.bz2"
    os.link(path, part)
    os.link(index, d / "enwiki-20231101-pages-articles-multistream-index3.txt-p151574p311329.bz2")
    docs, stats, planned = _read_units(part, 1)
    assert docs == whole and len(planned) == len(offsets) + 1


def test_a_glob_over_the_dump_directory_leaves_the_index_to_its_dump(generated, tmp_path):
    """'enwiki/*.bz2' names the dump and its index: the index is the dump's (found by name), not a
    corpus; an index given without its dump is an error that says to pass the dump."""
    _, pages, expected = generated
    path = tmp_path / "enwiki-pages-articles-multistream.xml.bz2"
    index = make_wiki_dump.write_dump(pages, str(path), pages_per_stream=5)
    sources = readers.parse_input([str(tmp_path / "*.bz2")])
    assert [(s.kind, s.path) for s in sources] == [("wiki", str(path))]
    assert _read_units(tmp_path / "*.bz2", 3000)[0] == list(expected.values())
    with pytest.raises(readers.InputError, match=r"index of a multistream Wikipedia dump.*pass"):
        readers.parse_input([index])
    (tmp_path / "notes.txt.bz2").write_bytes(bz2.compress(b"10:30:45 it began.\nIt ended.\n"))
    with pytest.raises(readers.InputError, match=r"notes.txt.bz2.*not a MediaWiki XML dump"):
        readers.parse_input([str(tmp_path / "notes.txt.bz2")])


@pytest.mark.parametrize("layout", ["xml", "xml.gz", "one-stream.xml.bz2", "no-index.xml.bz2"])
def test_other_layouts_are_one_sequential_unit(generated, layout):
    d, pages, expected = generated
    path = d / f"layout.{layout}"
    if layout == "xml.gz":
        make_wiki_dump.write_dump(pages, str(d / "plain.xml"))
        path.write_bytes(gzip.compress((d / "plain.xml").read_bytes()))
    else:
        make_wiki_dump.write_dump(
            pages, str(path), multistream=layout != "one-stream.xml.bz2", index=False
        )
    docs, stats, planned = _read_units(path, 1000)
    assert len(planned) == 1 and docs == list(expected.values()) and stats.documents == 40


def test_a_truncated_dump_or_a_wrong_index_is_an_error(generated):
    d, pages, _ = generated
    path = d / "cut-pages-articles-multistream.xml.bz2"
    index = make_wiki_dump.write_dump(pages, str(path), pages_per_stream=5)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(readers.InputError, match=r"cut-pages.*damaged or truncated"):
        _read_whole(path)
    with pytest.raises(readers.InputError, match="the index belongs to another dump"):
        _read_units(path, 1000)
    path.write_bytes(data)
    index_data = open(index, "rb").read()
    open(index, "wb").write(index_data[:-20])
    with pytest.raises(readers.InputError, match=r"index.txt.bz2.*damaged or truncated"):
        _read_units(path, 1000)
    open(index, "wb").write(bz2.compress(b"12:34:Title\nnot an index line\n"))
    with pytest.raises(readers.InputError, match="is not offset:page_id:title"):
        _read_units(path, 1000)
    (d / "broken.xml").write_text("<mediawiki><page><title>x</title></mediawiki>")
    with pytest.raises(readers.InputError, match=r"broken.xml.*not a well-formed"):
        _read_whole(d / "broken.xml")


@pytest.mark.parametrize(
    "source, expected",
    [
        ("A {{tpl|x={{inner|{{deep}}}}}}b.", ["A b."]),
        ("Born {{birth date|1947|4|1}} in {{lang|fr|Draguignan}}.", ["Born in Draguignan."]),
        ("It is {{convert|5|km|mi}} long.", ["It is 5 km long."]),
        ("Text.<ref name=a>{{cite web|url=http://x}}</ref> More.<ref name=a/>", ["Text. More."]),
        ("X (; born 1947) and (ANSI, ) and ( ).", ["X (born 1947) and (ANSI) and."]),
        (
            "[[Paris|the capital]], [[Lyon]] and [[:Category:Cities|cities]].",
            ["the capital, Lyon and cities."],
        ),
        ("[[File:A.jpg|thumb|A [[cat]] on a {{mat}}.]]Prose.", ["Prose."]),
        ("Prose.[[Category:X]][[de:Paris]][[zh-min-nan:Paris]]", ["Prose."]),
        (
            "A <!-- hidden\nlines --> b &amp; c&nbsp;d <span style='x'>e</span><br/>f.",
            ["A b & c d e f."],
        ),
        ("Intro.\n== Section ==\nBody.\n=== Sub ===\nMore.", ["Intro.", "Body.", "More."]),
        ("Intro.\n* item\n# numbered\n: indented\n; term\nAfter.", ["Intro.", "After."]),
        (
            "Body.\n== See also ==\nLinks.\n=== Sub ===\nMore links.\n== History ==\nOld.",
            ["Body.", "Old."],
        ),
        ('{| class="wikitable"\n| a || b\n|-\n| c\n|}\nAfter the table.', ["After the table."]),
        ("<gallery>\nFile:A.jpg|[[x]]\n</gallery>After.<math>x^2</math>", ["After."]),
        (
            "'''Bold''' and ''italic'' [https://e.org label] [https://e.org].__NOTOC__",
            ["Bold and italic label."],
        ),
        ("An {{unclosed template stays as text.", ["An {{unclosed template stays as text."]),
        # MediaWiki's closing tags have no attributes: "</ref name=x>" closes nothing.
        ("A<ref>x</ref name=a>y</ref> b.", ["A b."]),
        ("An <ref>unclosed ref keeps its text.", ["An unclosed ref keeps its text."]),
        ("A <ref>x<math>y</math>z</ref> b. <gallery>q<ref>r</ref></gallery>", ["A b."]),
        ("Intro.\n==Sub=\nBody.\n= Top =\nMore.", ["Intro.", "Body.", "More."]),
        ("[http://a.org\u00a0label] and [//b.org x y].", ["label and x y."]),
        # Other languages' file and category namespaces; a file link of a namespace not listed
        # (Catalan "Fitxer") is known by its parameters.
        (
            "[[Datei:Berlin.jpg|mini|Das [[Rathaus]].]]Berlin ist [[Hauptstadt|die Hauptstadt]]."
            "\n[[Kategorie:Stadt]]\n[[Категория:Города]][[Fichier:a.png|vignette|x]]",
            ["Berlin ist die Hauptstadt."],
        ),
        (
            "[[Fitxer:A.jpg|miniatura|Un [[gat]].]]Text [[Fitxer:B.jpg|esquerra|200px]] aquí.",
            ["Text aquí."],
        ),
        (
            "[[文件:A.png|缩略图|说明]]北京是[[中华人民共和国|中国]]的首都。[[分类:城市]]",
            ["北京是中国的首都。"],
        ),
    ],
)
def test_wikitext_constructs(source, expected):
    assert wikitext.paragraphs(source) == expected


def _hostile_pages():
    """Pages built to make a backtracking pattern quadratic: each was minutes of one worker's time
    before the cleaner scanned tags in order and its patterns stopped at brackets (an unclosed
    <ref> repeated: 32 s at 100 KB; "[http://a b " repeated: 160 s at 240 KB)."""
    n = 20_000
    return {
        "unclosed refs": "<ref>" * n,
        "unclosed comments": "<!--" * n,
        "unclosed math": "<math>" * n,
        "unclosed tables": "<table>" * n,
        "external links without ]": "[http://a b " * n,
        "a run of commas in brackets": "(x" + ", " * n,
        "a template name that goes on": "{{" + "disambig" * n,
        "a heading with a long gap": "=a" + " " * (5 * n) + "b\n",
        "stray closing tags": "</ref>" * n + "<ref>" * n,
        "nested templates": "{{a|" * n + "}}" * n,
        "nested file links": "[[File:a|" * n + "]]" * n,
    }


@pytest.mark.parametrize("name", list(_hostile_pages()))
def test_hostile_pages_clean_in_linear_time(name):
    """Not a speed target (bench/wiki_bench.py measures that): a page of 100-800 KB must not hold
    a worker for minutes. Linear cleaning takes well under a second here; 10 s is room for a
    loaded machine, and each of these took 15-160 s before."""
    page = _hostile_pages()[name]
    start = time.perf_counter()
    wikitext.is_disambiguation("T", page)
    paragraphs = wikitext.paragraphs(page)
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"{name}: {len(page)} characters took {elapsed:.1f} s"
    assert not [p for p in paragraphs if re.search(r"<ref|<math|<table|\{\{", p)]


def test_redirects_disambiguation_and_other_namespaces_are_not_articles():
    def article(title="T", text="Prose here. More prose.", namespace="0", redirect=False):
        return wiki.article(wiki.Page(title, namespace, redirect, text))

    assert article() == ["Prose here.", "More prose."]
    assert article(namespace="1") == [] and article(redirect=True) == []
    assert article(text="#REDIRECT [[Other]]") == [] and article(text="#redirect[[x]]") == []
    assert article(title="Mercury (disambiguation)") == []
    assert article(text="Mercury may be:\n* a planet\n{{Disambiguation|geo}}") == []
    assert article(text="Springfield is:\n{{geodis}}") == []
    assert article(text="{{Infobox}}\n* only a list") == []
    for template in (
        "{{Hospital disambiguation}}",
        "{{Begriffsklärung}}",
        "{{Homonymie}}",
        "{{Неоднозначность}}",
        "{{aimai}}",
        "{{消歧义}}",
        "{{ Dab |x}}",
    ):
        assert article(text=f"Mercury may be a planet.\n{template}") == [], template
    # Articles carry cleanup tags and hatnotes that share the stem: they stay articles.
    for template in (
        "{{Disambiguation needed|date=May 2020}}",
        "{{Begriffsklärungshinweis}}",
        "{{Voir homonymes|Mercure}}",
        "{{Other uses}}",
    ):
        text = f"Mercury is a planet.{template} It is small."
        assert article(text=text) == ["Mercury is a planet.", "It is small."], template


def test_exports_without_ns_take_the_namespace_from_the_title(tmp_path):
    """Schema 0.3/0.4 exports (before 2010) have no <ns>: "Talk:X" is a talk page by the dump's
    <siteinfo> (here a German wiki's names), or by MediaWiki's English names without one."""

    def page(title):
        text = f"{title} is the page. It has prose."
        return f"<page><title>{title}</title><revision><text>{text}</text></revision></page>"

    siteinfo = (
        "<siteinfo><sitename>Wikipedia</sitename><namespaces>"
        '<namespace key="0" /><namespace key="1">Diskussion</namespace>'
        '<namespace key="14">Kategorie</namespace></namespaces></siteinfo>'
    )
    titles = ["Berlin", "Diskussion:Berlin", "Kategorie:Stadt", "Star Wars: A New Hope", "Talk:X"]
    xml = '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" version="0.3">'
    (tmp_path / "de.xml").write_text(xml + siteinfo + "".join(map(page, titles)) + "</mediawiki>")
    docs, stats, _ = _read_whole(tmp_path / "de.xml")
    assert [d[0] for d in docs] == [
        "Berlin is the page.",
        "Star Wars: A New Hope is the page.",
        "Talk:X is the page.",
    ]
    assert stats.pages == 5 and stats.skipped_pages == 2
    (tmp_path / "en.xml").write_text(xml + "".join(map(page, titles)) + "</mediawiki>")
    docs, stats, _ = _read_whole(tmp_path / "en.xml")
    assert [d[0] for d in docs] == [
        "Berlin is the page.",
        "Diskussion:Berlin is the page.",
        "Kategorie:Stadt is the page.",
        "Star Wars: A New Hope is the page.",
    ]


def test_history_dumps_keep_the_latest_revision_and_only_it_in_memory():
    """A pages-meta-history page holds every revision: the article is the latest one, and memory
    holds one revision at a time (300 revisions of 38 KB: 14 MB at the peak when the page kept
    them all, 4 MB now)."""
    revisions = "".join(
        f"<revision><id>{i}</id><text>{f'Revision {i} text. ' * 2000}</text></revision>"
        for i in range(300)
    )
    xml = f"<mediawiki><page><title>H</title><ns>0</ns><id>1</id>{revisions}</page></mediawiki>"
    data = xml.encode()
    tracemalloc.start()
    try:
        chunks = (data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20))
        (page,) = wiki.pages(chunks, "history.xml", inside_root=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert page.text.startswith("Revision 299 text.") and len(page.text) == 38_000
    assert peak < 0.7 * len(data), f"{peak / 1e6:.1f} MB for an {len(data) / 1e6:.1f} MB page"


def test_the_real_sample_dump(tmp_path):
    """examples/data's sample: real enwiki pages (redirects, disambiguation pages, articles)."""
    docs, stats, planned = _read_units(SAMPLE, 20_000)
    assert len(planned) > 5 and stats.pages == 141 and stats.documents == len(docs) == 32
    sentences = [s for doc in docs for s in doc]
    assert len(sentences) > 1000 and not [s for s in sentences if MARKUP.search(s)]
    assert docs[0][0].startswith("A (named, plural As")
    assert "Austin is the capital of Texas in the United States." not in sentences  # its dab page
