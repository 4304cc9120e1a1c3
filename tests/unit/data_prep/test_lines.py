"""BERT-format text read as the original generator reads it (TensorFlow's GFile: lines end at
"\\n", every "\\r" dropped), and hostile JSON lines and running text that must not stop a job."""

import json
import random

import pytest

from data_prep import inputs, readers
from data_prep.sentences import split_sentences


def _docs(spec_list, **kwargs):
    stats = readers.ReadStats()
    docs = [
        d for s in readers.parse_input(spec_list) for d in readers.documents(s, stats, **kwargs)
    ]
    return docs, stats


def _gfile_documents(data: bytes) -> list[list[str]]:
    """The original generator's documents of a UTF-8 text file: it reads lines with TensorFlow's
    GFile, whose readline ends a line at "\\n" only and drops every "\\r" (buffered_inputstream.cc,
    ReadLineHelper), then strips each line; a blank line ends a document."""
    documents = [[]]
    for line in data.replace(b"\r", b"").decode("utf-8").split("\n"):
        line = line.strip()
        if not line:
            documents.append([])
        else:
            documents[-1].append(line)
    return [d for d in documents if d]


def test_carriage_returns_are_dropped_as_the_original_reads_lines(tmp_path):
    """A lone "\\r" inside a line is no space to the original ("two\\rwords" is one word), and a
    line of "\\r"s between paragraphs is blank; CRLF files read as LF files. Whole files (reference
    mode's reader) and every unit cut (scaled mode's) agree with it."""
    from data_prep import units

    pieces = [
        "two\rwords",
        "a\r\rb c",
        "\r",
        "\r\r",
        "",
        "x \r y",
        "end.\r",
        "\rstart",
        "e\r\u0301",
    ]
    rng = random.Random(5)
    for trial in range(40):
        lines = [rng.choice(pieces) for _ in range(rng.randint(1, 12))]
        data = ("\r\n" if trial % 2 else "\n").join(lines).encode()
        path = tmp_path / "cr.txt"
        path.write_bytes(data)
        want = _gfile_documents(data)
        assert _docs([str(path)])[0] == want, data
        for block in (1, 3, 1 << 20):
            planned = units.plan_units([readers.source_of(str(path))], block, 10)
            got = [d for u in planned for d in units.read_unit(u, readers.ReadStats())]
            assert got == want, (data, block)
    # Reference mode reads its files as one stream of lines: a last line of "\r"s alone is the
    # end of the file to GFile (readline gives ""), no blank line, so a document goes on.
    (tmp_path / "a.txt").write_bytes(b"One.\nTwo.\n\r")
    (tmp_path / "b.txt").write_bytes(b"Three.\n\nFour.\n")
    stats = readers.ReadStats()
    stream = [
        line
        for name in "ab"
        for line in inputs.read_lines(str(tmp_path / f"{name}.txt"), stats, drop_cr=True)
    ]
    assert stream == ["One.", "Two.", "Three.", "", "Four."]
    # Nor is a first line of a byte-order mark alone blank to the original.
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbf \r\nThree.\n")
    lines = list(inputs.read_lines(str(tmp_path / "b.txt"), stats, drop_cr=True, bom_line=True))
    assert lines == ["\ufeff", "Three."]


def test_lone_surrogate_escapes_in_jsonl_are_replaced_and_counted(tmp_path, vocab_file):
    """JSON may escape half a surrogate pair ("\\ud800", scraped text cut inside an emoji):
    json.loads gives a str no UTF-8 encoder (the sentence splitter, the tokenizers) accepts, and
    the job died with a UnicodeEncodeError. Such a character is replaced, as undecodable bytes
    of a text file are, and counted; a whole pair escaped is the character it encodes."""
    from bert_jax.text import tokenization
    from data_prep import units

    line = json.dumps({"text": "A lone \ud800 here. A pair \U0001f600 there. End \udfff."})
    path = tmp_path / "s.jsonl"
    path.write_text(f"{line}\n" * 3 + json.dumps({"text": "Clean one."}) + "\n")
    docs, stats = _docs([str(path)])
    assert docs[0] == ["A lone \ufffd here.", "A pair \U0001f600 there.", "End \ufffd."]
    assert len(docs) == 4 and stats.bad_utf8_lines == 3
    planned = units.plan_units([readers.source_of(str(path))], 50, 10)
    unit_stats = readers.ReadStats()
    assert [d for u in planned for d in units.read_unit(u, unit_stats)] == docs
    assert unit_stats.bad_utf8_lines == 3
    tok = tokenization.make_tokenizer(vocab_file)
    assert tok.encode_batch(docs[0])[0].tolist() == tok.encode(" ".join(docs[0]))


@pytest.mark.parametrize("space", ["\u00a0", "\u2009", "\u3000", "\u2028", "\u0085", "\u202f"])
def test_a_capital_and_a_wide_space_before_a_period_do_not_crash_the_splitter(space):
    """sentencex (Rust) panicked on an ASCII capital, a space of more than one UTF-8 byte and a
    period ("vitamin B\\u00a0."; a PanicException, which no `except Exception` catches), ending
    data_prep.main and data_prep.vocab in a traceback on a JSONL, Parquet, TFDS, book or dump
    corpus. The text is split as if the space were " ", and kept as it was."""
    text = f"The vitamin B{space}. It is good, says Dr. Smith{space}A. Next one."

    def squeezed(s):
        return "".join(s.split())

    for language in ("en", "de", "fr", "ja"):
        sentences = split_sentences(text, language)
        assert all(sentence in text for sentence in sentences), sentences  # kept as it was
        assert squeezed("".join(sentences)) == squeezed(text)  # nothing lost
    assert split_sentences(text)[0] == f"The vitamin B{space}."


def test_a_jsonl_line_nested_past_the_recursion_limit_is_a_bad_line(tmp_path):
    """json.loads raises RecursionError (no ValueError) on "[[[[...]]]]" nested 100,000 deep:
    one such line, first or later, ended data_prep.main in a traceback. It is a bad JSON line,
    counted, like any other."""
    from data_prep import units

    deep = "[" * 100_000 + "]" * 100_000
    good = json.dumps({"text": "A good sentence here. Another one."})
    for first in (True, False):
        lines = [good] * 5 + ['{"text": ' + deep + "}", good]
        lines.insert(0 if first else 3, deep)
        path = tmp_path / ("first.jsonl" if first else "later.jsonl")
        path.write_text("\n".join(lines) + "\n")
        docs, stats = _docs([str(path)])
        assert len(docs) == 6 and stats.bad_json_lines == 2
        planned = units.plan_units([readers.source_of(str(path))], 1 << 20, 10)
        assert [d for u in planned for d in units.read_unit(u, readers.ReadStats())] == docs
    (tmp_path / "deep.txt").write_text(deep + "\n" + good + "\n")  # not JSON lines: text
    assert readers.source_of(str(tmp_path / "deep.txt")).kind == "text"
    nested = tmp_path / "nested.txt"  # its first line an object nested too deep: not JSON lines
    nested.write_text('{"text": ' + deep + "}\n" + good + "\n")
    assert readers.source_of(str(nested)).kind == "text"


def test_jsonl_files_concatenated_with_their_byte_order_marks_are_read_whole(tmp_path):
    """`cat a.jsonl b.jsonl` of files written with a UTF-8 byte-order mark puts one at the start
    of a line inside the file: json.loads refuses it ("Unexpected UTF-8 BOM"), and that document
    was dropped as a bad JSON line. The mark is no part of the object."""
    from data_prep import units

    one = json.dumps({"text": "First file. Its text."}) + "\n"
    two = json.dumps({"text": "Second file. More text."}) + "\n"
    path = tmp_path / "cat.jsonl"
    path.write_bytes(("\ufeff" + one + "\ufeff" + two).encode())
    docs, stats = _docs([str(path)])
    assert docs == [["First file.", "Its text."], ["Second file.", "More text."]]
    assert stats.bad_json_lines == 0
    planned = units.plan_units([readers.source_of(str(path))], 30, 10)
    assert [d for u in planned for d in units.read_unit(u, readers.ReadStats())] == docs
