"""Corpus readers: BERT text files (globs, gzip), JSONL, TFDS, and bad input counted not fatal."""

import bz2
import gzip
import json
import os
import random
import re
import time

import pytest

from data_prep import inputs, readers, sentences, sniff
from data_prep.sentences import split_sentences


def _docs(spec_list, **kwargs):
    stats = readers.ReadStats()
    docs = [
        d for s in readers.parse_input(spec_list) for d in readers.documents(s, stats, **kwargs)
    ]
    return docs, stats


def test_text_documents_split_at_blank_lines_plain_gz_and_globs(tmp_path):
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\n\nThree.\n")
    with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
        f.write("Four.\n   \nFive.\nSix.")
    docs, stats = _docs([str(tmp_path / "*.txt*")])
    assert docs == [["One.", "Two."], ["Three."], ["Four."], ["Five.", "Six."]]
    assert stats.files == 2 and stats.documents == 4


def test_undecodable_bytes_are_counted_and_dropped(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"good line\ncaf\xe9 \xff\xfe line\n\nnext doc\n")
    docs, stats = _docs([str(tmp_path / "bad.txt")])
    assert stats.bad_utf8_lines == 1
    assert docs[0][1] == "caf\ufffd \ufffd\ufffd line" and docs[1] == ["next doc"]


def test_empty_file_is_counted(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    docs, stats = _docs([str(tmp_path / "empty.txt")])
    assert docs == [] and stats.empty_files == 1


def test_missing_inputs_are_clear_errors(tmp_path):
    with pytest.raises(readers.InputError, match="matches no file"):
        readers.parse_input([str(tmp_path / "*.txt")])
    with pytest.raises(readers.InputError, match="does not exist"):
        readers.parse_input([str(tmp_path / "nope.txt")])
    with pytest.raises(readers.InputError, match="is a directory, not a file"):
        readers.parse_input([str(tmp_path)])
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(readers.InputError, match="is a named pipe"):
        readers.parse_input([str(tmp_path / "pipe")])
    with pytest.raises(readers.InputError, match="no input"):
        readers.parse_input([])


def test_jsonl_documents_are_split_into_sentences(tmp_path):
    rows = [
        {"text": "Dr. Smith went home. He slept!\nNew paragraph here."},
        {"title": "no text"},
        {"text": ""},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    docs, stats = _docs([str(path)])
    assert docs == [["Dr. Smith went home.", "He slept!", "New paragraph here."]]
    assert stats.bad_json_lines == 2  # the object without "text" and the non-JSON line


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("It rains. It pours.", ["It rains.", "It pours."]),
        (
            'See Fig. 3 and e.g. this. Then "Quoted." Done',
            ["See Fig. 3 and e.g. this.", 'Then "Quoted."', "Done"],
        ),
        ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
        ("version 3.11 is out. 42 is a number.", ["version 3.11 is out.", "42 is a number."]),
    ],
)
def test_split_sentences(text, sentences):
    assert split_sentences(text) == sentences


def test_running_text_is_split_by_the_language_asked(tmp_path):
    """--language picks the sentence rules of JSONL, Parquet and book text (whole-file reads and
    work units alike): German keeps "Am 3. Mai" (a date) and "Nr. 5" in one sentence, where
    English rules split after "3."; a code that is not a language is refused."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    from data_prep import sentences, units

    text = "Am 3. Mai kam Zug Nr. 5 an. Dann fuhr er weiter."
    german = [["Am 3. Mai kam Zug Nr. 5 an.", "Dann fuhr er weiter."]]
    (tmp_path / "de.jsonl").write_text(json.dumps({"text": text}) + "\n")
    pq.write_table(pyarrow.table({"text": [text]}), tmp_path / "de.parquet")
    (tmp_path / "de.txt").write_text(text + "\n")
    for name, kwargs in (("de.jsonl", {}), ("de.parquet", {}), ("de.txt", {"book": True})):
        sources = readers.parse_input([str(tmp_path / name)], document_per_file="book" in kwargs)
        for language, expected in (("de", german), ("en", None)):
            stats = readers.ReadStats()
            docs = [d for s in sources for d in readers.documents(s, stats, language=language)]
            planned = units.plan_units(sources, 1 << 20, 10)
            unit_docs = [d for u in planned for d in units.read_unit(u, stats, language=language)]
            assert docs == unit_docs, (name, language)
            if expected:
                assert docs == expected, name
            else:
                assert docs != german and docs[0][0] == "Am 3.", (name, docs)
    with pytest.raises(ValueError, match="'en!' is not a language code"):
        sentences.language_code("en!")
    assert sentences.language_code("simple") == "en"
    assert sentences.language_code("zh_min_nan") == "zh-min-nan"


def test_split_sentences_merges_lower_case_pieces_in_linear_time():
    """A piece starting in lower case joins the sentence before it (a split after an
    abbreviation); 200,000 of them in a row (2.8 MB) took 8 s when each merge copied the sentence
    so far, and take a tenth of a second now: 10 s leaves room for a loaded machine."""
    assert split_sentences("He ran. then he went. Yes.") == [
        "He ran. then he went.",
        "Yes.",
    ]
    text = "He ran. " + "then he went. " * 200_000
    start = time.perf_counter()
    (sentence,) = split_sentences(text)
    assert time.perf_counter() - start < 10 and sentence == text.strip()


_PIECES = [
    "He ran.",
    "Dr. Smith came.",
    "It cost 3.5 dollars.",
    "U.S. troops left.",
    "then more.",
    "\u4e2d\u6587\u3002",
    "\u65e5\u672c\u8a9e\u3067\u3059\u3002",
    "\u0928\u092e\u0938\u094d\u0924\u0947\u0964",
    "Wow!",
    "Why?",
    "(Paren.)",
    "Mr. X",
    "No. 5 is",
    "\u00bfQu\u00e9?",
    "A.B.C. corp",
    "\u0645\u0631\u062d\u0628\u0627.",
    "\u3002\u3002",
    "1.",
    "i.e.",
    "\U0001f600.",
]


def test_a_long_paragraph_is_split_a_window_at_a_time_as_in_one_call(monkeypatch):
    """sentencex's time grows with the square of a paragraph whose sentence ends have no space
    after them (Chinese: 360 kB took 3 s, a 1 MB one minutes): a long paragraph goes to it a window
    at a time, and gives the sentences of one call, whatever the language and punctuation."""
    rng = random.Random(0)
    real_segment = sentences.sentencex.segment
    calls = []

    def segment(language, text):
        calls.append(len(text))
        return real_segment(language, text)

    cases = []
    for _ in range(40):
        language = rng.choice(["en", "zh", "ja", "hi", "de", "ar"])
        glue = rng.choice(["", " "])
        text = glue.join(rng.choice(_PIECES) + rng.choice([" ", ""]) for _ in range(300))
        cases.append((language, text, split_sentences(text, language)))  # one call: < _WINDOW
    monkeypatch.setattr(sentences, "_WINDOW", 300)
    monkeypatch.setattr(sentences, "_MARGIN", 60)
    monkeypatch.setattr(sentences.sentencex, "segment", segment)
    for language, text, whole in cases:
        assert split_sentences(text, language) == whole, (language, text)
    # Quotes (whose pairing sentencex counts from the text's start) and unclosed brackets, inside
    # which it does not split, may be read otherwise after a window's start; nothing is lost.
    text = " ".join(rng.choice([*_PIECES, "(", '"']) for _ in range(1000))
    assert "".join(split_sentences(text)).replace(" ", "") == text.replace(" ", "")
    calls.clear()
    assert len(split_sentences("\u4e2d\u6587\u3002" * 3000, "zh")) == 3000
    assert max(calls) <= 300 + 60  # bounded pieces: linear time


def test_a_sentence_longer_than_a_window_is_cut_in_linear_time(monkeypatch):
    """sentencex is quadratic on some text it does not split at all: a 1.5 MB paragraph of "' "
    repeated took 86 s when a window grew to hold the whole sentence, and takes a
    second now that a sentence filling _LONGEST characters is cut (10 s leaves room for a loaded
    machine). Shorter sentences are those of one call, and nothing is lost."""
    text = "\"' " * 500_000
    start = time.perf_counter()
    pieces = split_sentences(text)
    assert time.perf_counter() - start < 10
    assert " ".join(pieces) == text.strip() and max(map(len, pieces)) <= sentences._LONGEST
    # sentencex's quote pairing costs (quote marks) x (characters): 100 kB of `"「` took 159 s,
    # 2 s a 20,000-character window; a window also ends at its 2,000th quote mark now.
    text = '"\u300c' * 100_000
    start = time.perf_counter()
    pieces = split_sentences(text, "ja")
    assert time.perf_counter() - start < 10 and "".join(pieces) == text
    rng = random.Random(0)
    cases = []
    for _ in range(40):
        glue = rng.choice(["", " "])
        # Quotes and brackets too, for what is lost; sentencex pairs them from the text's start.
        runs = ["a ", "\u4e2d", "ab"] + (["\u00ab", "' ", "("] if len(cases) % 2 else [])
        unsplit = rng.choice(runs) * rng.randrange(1, 400)
        text = glue.join(rng.choice([*_PIECES, unsplit]) + rng.choice([" ", ""]) for _ in range(60))
        cases.append((text, split_sentences(text), len(cases) % 2))  # one call: < _WINDOW
    monkeypatch.setattr(sentences, "_WINDOW", 300)
    monkeypatch.setattr(sentences, "_MARGIN", 60)
    monkeypatch.setattr(sentences, "_LONGEST", 600)
    for text, whole, quoted in cases:
        got = split_sentences(text)
        if not quoted and max(map(len, whole)) < 600 - 60:
            assert got == whole, text
        assert "".join(got).replace(" ", "") == text.replace(" ", "")


def test_tfds_dataset_by_name_and_split(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")

    class TinyWiki(tfds.core.GeneratorBasedBuilder):
        """A local Wikipedia-shaped dataset (title, text), prepared offline in ArrayRecord
        format."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {"title": tfds.features.Text(), "text": tfds.features.Text()}
                ),
            )

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(5), "test": self._generate_examples(2)}

        def _generate_examples(self, n):
            for i in range(n):
                yield (
                    i,
                    {
                        "title": f"t{i}",
                        "text": f"Article {i} begins. It goes on.\nA paragraph {i}!",
                    },
                )

    TinyWiki(data_dir=str(tmp_path), file_format="array_record").download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    docs, stats = _docs(["tfds:tiny_wiki:test"], tfds_data_dir=str(tmp_path))
    assert len(docs) == 2 and stats.documents == 2 and stats.files == 1
    assert sorted(docs)[0] == ["Article 0 begins.", "It goes on.", "A paragraph 0!"]
    with pytest.raises(readers.InputError, match="no field 'body'"):
        _docs(["tfds:tiny_wiki:test"], tfds_data_dir=str(tmp_path), text_field="body")
    with pytest.raises(readers.InputError, match="cannot open TFDS dataset"):
        _docs(["tfds:tiny_wiki_missing"], tfds_data_dir=str(tmp_path))


# Inputs that are not UTF-8 text: refused with the file's name, or read for what they are. Before
# the kind was sniffed from the content, each of these was read as text lines (a UTF-16 file
# gave records of single letters and exit 0; a truncated .gz gave fewer documents silently).


@pytest.mark.parametrize(
    "encoding, said",
    [("utf-16", "UTF-16"), ("utf-16-be", None), ("utf-32", "UTF-32"), ("utf-32-le", None)],
)
def test_utf16_and_utf32_text_is_refused_naming_the_file(tmp_path, encoding, said):
    path = tmp_path / "wide.txt"
    text = "First sentence of the book.\nSecond one.\n\nNext document.\n"
    path.write_bytes(text.encode(encoding))  # "utf-16"/"utf-32" write a byte-order mark
    with pytest.raises(readers.InputError, match=said or "NUL bytes") as error:
        readers.parse_input([str(path)])
    assert str(path) in str(error.value)


def test_a_stray_nul_in_utf8_text_is_read_as_the_original_reads_it(tmp_path, vocab_file):
    """U+0000 is a code point like any other to the original generator (its _clean_text drops it):
    a UTF-8 file holding one or two is read, where UTF-16 (a NUL per ASCII character) is refused."""
    from bert_jax.text import tokenization

    (tmp_path / "nul.txt").write_bytes(b"A NUL\x00here.\nNext one.\n\nSecond doc.\n")
    docs, _ = _docs([str(tmp_path / "nul.txt")])
    assert docs == [["A NUL\x00here.", "Next one."], ["Second doc."]]
    tok = tokenization.make_tokenizer(vocab_file, True)
    assert tok.tokenize(docs[0][0]) == tok.tokenize("A NULhere.")
    (tmp_path / "many.txt").write_bytes(b"text\x00" * 100)
    with pytest.raises(readers.InputError, match=r"many.txt.*NUL bytes"):
        readers.parse_input([str(tmp_path / "many.txt")])


def test_mostly_undecodable_bytes_are_refused_a_few_are_repaired(tmp_path):
    cyrillic = "Привет, мир. Это текст в другой кодировке.\n" * 20
    (tmp_path / "cp1251.txt").write_bytes(cyrillic.encode("cp1251"))
    with pytest.raises(readers.InputError, match=r"cp1251.txt.*not UTF-8"):
        readers.parse_input([str(tmp_path / "cp1251.txt")])
    (tmp_path / "random.bin").write_bytes(
        bytes(random.Random(0).randrange(1, 256) for _ in range(4096))
    )
    with pytest.raises(readers.InputError, match=r"random.bin"):
        readers.parse_input([str(tmp_path / "random.bin")])
    latin1 = "Un café près de la gare. Très bien.\n" * 20  # every line loses letters: refused
    (tmp_path / "latin1.txt").write_bytes(latin1.encode("latin-1"))
    with pytest.raises(readers.InputError, match=r"latin1.txt.*20 of its first 20 lines.*LATIN1"):
        readers.parse_input([str(tmp_path / "latin1.txt")])
    stray = "A line.\n" * 19 + "Un café près de la gare.\n"  # one bad line: read, counted
    (tmp_path / "stray.txt").write_bytes(stray.encode("latin-1"))
    docs, stats = _docs([str(tmp_path / "stray.txt")])
    assert stats.bad_utf8_lines == 1 and docs[0][-1] == "Un caf\ufffd pr\ufffds de la gare."


def test_utf8_text_holding_replacement_characters_is_read_not_refused(tmp_path):
    """U+FFFD written in UTF-8 (text decoded with replacement upstream, as web crawls often are)
    is a character like any other, which the original reads and its tokenizer drops; it was
    counted as an undecodable byte, so such a corpus was refused as "Latin-1 text"."""
    rng = random.Random(0)
    for case in range(20):
        lines = [
            "".join(rng.choice(["don\ufffdt ", "\ufffd", "word ", "caf\ufffd. "]) for _ in range(9))
            for _ in range(rng.randint(8, 40))
        ]
        path = tmp_path / f"fffd{case}.txt"
        path.write_bytes("\n".join(lines).encode("utf-8"))
        docs, stats = _docs([str(path)])
        assert docs == [[line.strip() for line in lines]] and stats.bad_utf8_lines == 0
        # The same text with a byte that does not decode on every line is still refused.
        path.write_bytes(b"\n".join(line.encode() + b" caf\xe9" for line in lines))
        with pytest.raises(readers.InputError, match=rf"fffd{case}.txt.*not UTF-8"):
            readers.parse_input([str(path)])


def test_a_utf8_byte_order_mark_is_dropped(tmp_path):
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfFirst.\nSecond.\n")
    docs, stats = _docs([str(tmp_path / "bom.txt")])
    assert docs == [["First.", "Second."]] and stats.bad_utf8_lines == 0


def test_truncated_gzip_is_an_error_not_fewer_documents(tmp_path):
    data = gzip.compress(("A sentence here.\n\n" * 2000).encode())
    (tmp_path / "cut.txt.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(readers.InputError, match=r"cut.txt.gz.*damaged or truncated"):
        _docs([str(tmp_path / "cut.txt.gz")])


def test_a_cut_bz2_file_is_named_truncated_not_another_format(tmp_path):
    """A dump (or any bz2 file) cut inside its first stream decompresses to nothing yet: the error
    says it is truncated, not that it is no MediaWiki dump (to be bunzipped or gzipped)."""
    page = b"<page><title>T</title><ns>0</ns><revision><text>Words here.</text></revision></page>"
    data = bz2.compress(b"<mediawiki>" + page * 2000 + b"</mediawiki>\n")
    for cut in (len(data) // 2, len(data) - 1, 10):
        (tmp_path / "dump.xml.bz2").write_bytes(data[:cut])
        with pytest.raises(readers.InputError, match=r"dump.xml.bz2.*truncated") as error:
            for source in readers.parse_input([str(tmp_path / "dump.xml.bz2")]):
                list(readers.documents(source, readers.ReadStats()))
        assert "not a MediaWiki" not in str(error.value)
    (tmp_path / "dump.xml.bz2").write_bytes(data)
    assert readers.parse_input([str(tmp_path / "dump.xml.bz2")])[0].kind == "wiki"


@pytest.mark.parametrize("pack", [bytes, gzip.compress], ids=["plain", "gzip"])
def test_json_lines_with_a_byte_order_mark_are_json_lines_whatever_the_name(tmp_path, pack):
    """A JSONL export a Windows tool wrote with a UTF-8 mark, named .txt or .gz, reads as its
    twin without the mark: documents of its text field, not sentences of braces and keys."""
    lines = b'{"text": "Hello world. This is one."}\n{"id": 2, "text": "Second doc. Yes."}\n'
    docs = []
    for name, data in (("marked.txt", b"\xef\xbb\xbf" + lines), ("plain.txt", lines)):
        (tmp_path / name).write_bytes(pack(data))
        (source,) = readers.parse_input([str(tmp_path / name)])
        assert source.kind == "jsonl", name
        docs.append(list(readers.documents(source, readers.ReadStats())))
    assert docs[0] == docs[1] == [["Hello world.", "This is one."], ["Second doc.", "Yes."]]


@pytest.mark.parametrize("end", [b"\n", b""], ids=["line-end", "no-line-end"])
def test_json_lines_whose_first_record_is_longer_than_the_sniffed_head(tmp_path, end):
    """A JSONL file of long articles, named .txt or .gz: its first record runs past the 64 KB the
    sniffer looks at, and is still read as JSON, not as a sentence of braces and keys."""
    long_text = " ".join(f"Sentence number {i} is here." for i in range(4000))
    data = json.dumps({"text": long_text}).encode() + b"\n" + b'{"text": "Short one. Two."}' + end
    assert data.index(b"\n") > sniff.HEAD_BYTES
    for name, pack in (("long.txt", bytes), ("long.data.gz", gzip.compress)):
        (tmp_path / name).write_bytes(pack(data))
        (source,) = readers.parse_input([str(tmp_path / name)])
        docs = list(readers.documents(source, readers.ReadStats()))
        assert source.kind == "jsonl" and len(docs) == 2 and docs[1] == ["Short one.", "Two."]
    (tmp_path / "one.txt").write_bytes(data.split(b"\n")[0] + end)  # one record, the whole file
    assert readers.parse_input([str(tmp_path / "one.txt")])[0].kind == "jsonl"


def test_a_piece_cut_out_of_a_jsonl_file_is_json_lines(tmp_path):
    """`split -b 1G corpus.jsonl part-` gives pieces without a name that says JSON, each starting
    inside a record: the piece is JSON lines (its torn first line counted as a bad line), not
    text whose sentences are braces and keys; text with a JSON object among its lines is text."""
    records = b"".join(b'{"text": "Record %d is here. It ends."}\n' % i for i in range(6))
    (tmp_path / "part-ab").write_bytes(b'e is the tail."}\n' + records)
    (source,) = readers.parse_input([str(tmp_path / "part-ab")])
    stats = readers.ReadStats()
    docs = list(readers.documents(source, stats))
    assert source.kind == "jsonl" and len(docs) == 6 and stats.bad_json_lines == 1
    (tmp_path / "notes.txt").write_bytes(b'A line.\n{"a": 1}\nAnother line.\n\nMore text.\n')
    assert readers.parse_input([str(tmp_path / "notes.txt")])[0].kind == "text"


def test_names_lie_content_decides(tmp_path):
    # A ".gz" that is plain text is read as text; a gzip file without the suffix is gunzipped.
    (tmp_path / "fake.txt.gz").write_bytes(b"Plain text.\nNot compressed.\n")
    (tmp_path / "real.txt").write_bytes(gzip.compress(b"Compressed text.\n"))
    docs, _ = _docs([str(tmp_path / "fake.txt.gz"), str(tmp_path / "real.txt")])
    assert docs == [["Plain text.", "Not compressed."], ["Compressed text."]]
    (tmp_path / "junk.gz").write_bytes(b"\x1f\x8b\x08\x00garbage that is no deflate stream")
    with pytest.raises(readers.InputError, match=r"junk.gz.*not valid gzip"):
        readers.parse_input([str(tmp_path / "junk.gz")])
    # JSON lines are JSON lines under any name (a .txt, a .gz); braces that are not JSON are text.
    lines = b'{"text": "A doc. Two."}\n{"id": 2, "text": "B doc."}\n'
    (tmp_path / "jsonl.txt").write_bytes(lines)
    (tmp_path / "jsonl_gz").write_bytes(gzip.compress(lines))
    (tmp_path / "braces.txt").write_bytes(b"{not json} at all.\n{x: 1} either.\n")
    sources = readers.parse_input(
        [str(tmp_path / n) for n in ("jsonl.txt", "jsonl_gz", "braces.txt")]
    )
    assert [s.kind for s in sources] == ["jsonl", "jsonl", "text"]
    docs, _ = _docs([str(tmp_path / "jsonl.txt"), str(tmp_path / "jsonl_gz")])
    assert docs == [["A doc.", "Two."], ["B doc."]] * 2
    (tmp_path / "text.bz2").write_bytes(bz2.compress(b"Some text, not a dump.\n"))
    with pytest.raises(readers.InputError, match=r"text.bz2.*not a MediaWiki XML dump"):
        readers.parse_input([str(tmp_path / "text.bz2")])


@pytest.mark.parametrize(
    "content, said",
    [
        (b"\xfd7zXZ\x00\x00\x04", "is xz-compressed: decompress it (unxz)"),
        (b"\x28\xb5\x2f\xfd\x04\x58", "is zstd-compressed: decompress it (zstd -d)"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "is a 7-Zip archive: extract it"),
        (b"PK\x03\x04\x14\x00", "is a zip archive: extract it"),
        (
            b'<?xml version="1.0"?>\n<rss><channel/></rss>',
            "XML file but not a MediaWiki export (its root element is <rss>",
        ),
        (b"<?xml version='1.0'?><!-- x --><html><body>Hi.</body></html>", "root element is <html>"),
    ],
)
def test_formats_that_are_not_read_are_named(tmp_path, content, said):
    """Compressed and archived corpora, and XML that is not a dump: an error that says what the
    file is and what to do, not a generic "holds NUL bytes" (nor XML read as text)."""
    (tmp_path / "corpus.txt").write_bytes(content + b"\x00" * 64)
    with pytest.raises(readers.InputError, match=re.escape(said)):
        readers.parse_input([str(tmp_path / "corpus.txt")])


def test_an_xml_prolog_before_the_dump_root(tmp_path):
    """Comments, processing instructions and a DOCTYPE (its entities expanded by expat, with
    expat's limit on amplification: a "billion laughs" page is an error, not gigabytes)."""
    page = b"<page><title>T</title><ns>0</ns><id>1</id><revision><text>%s</text></revision></page>"
    head = b'<?xml version="1.0"?>\n<!-- exported -->\n<?pi x?>\n<!DOCTYPE m [\n%s\n]>\n'
    dump = (
        head % b'<!ENTITY w "world">'
        + b"<mediawiki>"
        + page % b"Hello &w;. Bye now."
        + b"</mediawiki>"
    )
    (tmp_path / "d.xml").write_bytes(dump)
    docs, _ = _docs([str(tmp_path / "d.xml")])
    assert docs == [["Hello world.", "Bye now."]]
    import pyexpat

    if pyexpat.version_info < (2, 4, 0):
        pytest.skip(f"{pyexpat.EXPAT_VERSION} predates expat's limit on entity amplification")
    entities = b'<!ENTITY a0 "lol">' + b"".join(
        b'<!ENTITY a%d "%s">' % (i, b"&a%d;" % (i - 1) * 10) for i in range(1, 10)
    )
    (tmp_path / "laughs.xml").write_bytes(
        head % entities + b"<mediawiki>" + page % b"&a9;" + b"</mediawiki>"
    )
    with pytest.raises(readers.InputError, match=r"laughs.xml.*not a well-formed.*amplification"):
        _docs([str(tmp_path / "laughs.xml")])


@pytest.mark.parametrize("prolog", [b"<!-- exported -->", b"<!DOCTYPE mediawiki>", b"<?pi x?>"])
@pytest.mark.parametrize("pack", [bytes, gzip.compress, bz2.compress])
def test_a_dump_without_an_xml_declaration_but_a_prolog_is_a_dump(tmp_path, prolog, pack):
    """The XML declaration is optional: a comment, DOCTYPE or processing instruction may open a
    dump without one (read as text before: its tags and titles became records, exit 0)."""
    page = b"<page><title>T</title><ns>0</ns><id>1</id><revision><text>%s</text></revision></page>"
    dump = b"<mediawiki>" + page % b"The '''text''' of [[T|it]]. Second one." + b"</mediawiki>"
    (tmp_path / "d.xml").write_bytes(pack(b"\n " + prolog + b"\n" + dump))
    assert _docs([str(tmp_path / "d.xml")])[0] == [["The text of it.", "Second one."]]
    if pack is bz2.compress:
        return  # bz2 holds dumps only
    (tmp_path / "t.txt").write_bytes(pack(prolog + b"\nA text file. Its prose.\n"))
    assert _docs([str(tmp_path / "t.txt")])[0] == [[prolog.decode(), "A text file. Its prose."]]


@pytest.mark.parametrize("pack", [bytes, gzip.compress, bz2.compress])
def test_a_dump_in_an_encoding_the_parser_does_not_read_is_refused_naming_it(tmp_path, pack):
    """Multi-byte encodings other than UTF-8/16 (an export converted for a Japanese, Korean or
    Chinese tool) and unknown names stopped the read with expat's ValueError or LookupError and
    a traceback; single-byte ones are read, as the UTF-8 twin."""
    page = "<page><title>T</title><ns>0</ns><id>1</id><revision><text>%s</text></revision></page>"
    text = {
        "shift_jis": "川は長い。",
        "euc-kr": "강은 길다.",
        "gbk": "河很长。",
        "big5": "河很長。",
    }
    text |= {"windows-1252": "Thé rivér is long.", "koi8-r": "Река длинная."}
    for encoding, words in text.items():
        xml = f'<?xml version="1.0" encoding="{encoding}"?>\n<mediawiki>{page % words}</mediawiki>'
        (tmp_path / "d.xml").write_bytes(pack(xml.encode(encoding)))
        if encoding in ("windows-1252", "koi8-r"):
            assert _docs([str(tmp_path / "d.xml")])[0] == [[words]]
            continue
        with pytest.raises(readers.InputError, match=rf"d.xml' is .* in {encoding}, .*iconv -f"):
            _docs([str(tmp_path / "d.xml")])
    xml = f'<?xml version="1.0" encoding="utf-9"?>\n<mediawiki>{page % "x"}</mediawiki>'
    (tmp_path / "d.xml").write_bytes(pack(xml.encode()))
    with pytest.raises(readers.InputError, match="unknown encoding, 'utf-9'"):
        _docs([str(tmp_path / "d.xml")])


def test_dumps_and_parquet_are_recognised_by_content_whatever_the_name(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    dump = b'<mediawiki xmlns="x"><siteinfo/><page><title>T</title><ns>0</ns><id>1</id>'
    dump += b"<revision><text>The '''text''' of [[T|it]]. Second sentence.</text></revision>"
    dump += b"</page></mediawiki>"
    (tmp_path / "dump.txt").write_bytes(bz2.compress(dump))
    pq.write_table(
        pyarrow.table({"text": ["Row one. Its second sentence."]}), tmp_path / "rows.txt"
    )
    sources = readers.parse_input([str(tmp_path / "dump.txt"), str(tmp_path / "rows.txt")])
    assert [(s.kind, s.compression) for s in sources] == [("wiki", "bz2"), ("parquet", "")]
    docs, stats = _docs([str(tmp_path / "dump.txt"), str(tmp_path / "rows.txt")])
    assert docs == [["The text of it.", "Second sentence."], ["Row one.", "Its second sentence."]]
    assert stats.pages == 1 and stats.files == 2


def test_over_long_lines_are_skipped_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 64)
    path = tmp_path / "long.txt"
    path.write_bytes(b"short one.\n" + b"x" * 500 + b"\nafter it.\n\n" + b"y" * 100)
    docs, stats = _docs([str(path)])
    assert docs == [["short one.", "after it."]] and stats.long_lines == 2 and stats.lines == 5


def test_document_per_file_reads_books_as_one_document_each(tmp_path):
    (tmp_path / "book1.txt").write_text("Chapter one begins. It rains.\nThe end of it.\n")
    (tmp_path / "book2.txt").write_text("Another book. Short.\n")
    stats = readers.ReadStats()
    sources = readers.parse_input([str(tmp_path / "book*.txt")], document_per_file=True)
    docs = [d for s in sources for d in readers.documents(s, stats)]
    assert [s.kind for s in sources] == ["book", "book"]
    assert docs == [
        ["Chapter one begins.", "It rains.", "The end of it."],
        ["Another book.", "Short."],
    ]


def test_the_sentence_splitter_on_the_labelled_set():
    """Boundary F1 on ~300 hand-labelled sentences full of traps (bench/sentence_bench.py prints
    the comparison with other segmenters): a regression here is a worse splitter."""
    from bench import sentence_bench

    scores = sentence_bench.score(split_sentences, sentence_bench.labelled_paragraphs())
    assert scores["f1"] > 0.96 and scores["exact"] > 0.9, scores


def test_a_file_whose_name_looks_like_a_pattern_is_read(tmp_path):
    """ "book [1].txt" is a glob pattern to Python ([1] a class of "1") that matches no file: the
    file itself was refused ("--input pattern ... matches no file"). As a shell does, a pattern
    that matches nothing names the file of that name when there is one."""
    (tmp_path / "book [1].txt").write_text("One.\n\nTwo.\n")
    (tmp_path / "c[ab].txt").write_text("Three.\n")
    (tmp_path / "ca.txt").write_text("Four.\n")
    assert _docs([str(tmp_path / "book [1].txt")])[0] == [["One."], ["Two."]]
    assert _docs([str(tmp_path / "c[ab].txt")])[0] == [["Four."]]  # the pattern matches ca.txt
    with pytest.raises(readers.InputError, match="matches no file"):
        readers.parse_input([str(tmp_path / "book [2].txt")])
