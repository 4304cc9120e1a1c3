"""Work units: cut at any block size, they give exactly the documents and counts of reading whole
files."""

import gzip
import json
import random

from data_prep import inputs, lines, readers, units


def _whole(path, kind):
    """The documents and counts of reading the file from start to end, line by line, as the
    original generator reads text (reference mode's reader), independently of the unit readers."""
    stats = readers.ReadStats()
    source = readers.source_of(str(path))
    assert source.kind == kind
    read = inputs.read_lines(str(path), stats, drop_cr=kind == "text")
    if kind == "text":
        return list(lines.text_documents(read, stats)), stats
    docs = [d for line in read if (d := lines.json_document(line, "text", stats))]
    stats.documents += len(docs)
    return docs, stats


def test_a_whole_file_is_read_as_one_unit(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfOne.\r\nTwo.\n\n\nThree \xff.\n\r")
    stats = readers.ReadStats()
    docs = list(readers.documents(readers.source_of(str(path)), stats))
    assert (docs, stats) == _whole(path, "text")


def _by_units(path, kind, block_bytes):
    stats = readers.ReadStats()
    source = readers.source_of(str(path))
    assert source.kind == kind
    planned = units.plan_units([source], block_bytes, 10)
    return [d for u in planned for d in units.read_unit(u, stats)], stats, planned


def test_text_blocks_partition_documents_at_every_cut(tmp_path, monkeypatch):
    # Blank and whitespace-only lines, CRLF, a non-breaking-space line (blank after strip), bad
    # UTF-8, over-long lines, no final newline: every block boundary position is tried on many
    # such files (a UTF-8 byte-order mark at the start of some).
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 12)
    pieces = [
        b"a line too long to keep\n",
        b"a b\n",
        b"\n",
        b"  \n",
        b"x\n",
        "\xa0\n".encode(),
        b"long line of words here\n",
        b"\r\n",
        b"z",
        "caf\xe9\n".encode(),
        b"x\xff\xfe\n",
    ]
    rng = random.Random(0)
    path = tmp_path / "t.txt"
    for trial in range(150):
        bom = b"\xef\xbb\xbf" if trial % 3 == 0 else b""
        path.write_bytes(bom + b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 25))))
        expected, expected_stats = _whole(path, "text")
        for block in (1, 2, 3, 5, 8, 1 << 20):
            docs, stats, _ = _by_units(path, "text", block)
            assert docs == expected, (path.read_bytes(), block)
            assert stats == expected_stats, (path.read_bytes(), block)


def test_real_corpus_in_blocks(testdata):
    expected, expected_stats = _whole(testdata / "pydocs_small.txt", "text")
    docs, stats, planned = _by_units(testdata / "pydocs_small.txt", "text", 20_000)
    assert len(planned) == 21 and docs == expected and stats == expected_stats
    assert [u.index for u in planned] == list(range(21)) and sum(u.first for u in planned) == 1


def test_jsonl_blocks_and_whole_gz_files(tmp_path):
    rows = [json.dumps({"text": f"Doc {i}. It has two sentences."}) for i in range(40)] + [
        "not json",
        "",
    ]
    random.Random(1).shuffle(rows)
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(rows) + "\n")
    expected, expected_stats = _whole(path, "jsonl")
    for block in (1, 7, 100, 1 << 20):
        docs, stats, _ = _by_units(path, "jsonl", block)
        assert docs == expected and stats == expected_stats and stats.bad_json_lines == 1
    with gzip.open(tmp_path / "d.txt.gz", "wb") as f:
        f.write(b"One.\nTwo.\n\nThree.\n")
    docs, stats, planned = _by_units(tmp_path / "d.txt.gz", "text", 4)
    assert len(planned) == 1 and docs == [["One.", "Two."], ["Three."]] and stats.files == 1
    with gzip.open(tmp_path / "e.txt.gz", "wb"):
        pass
    docs, stats, _ = _by_units(tmp_path / "e.txt.gz", "text", 4)
    assert docs == [] and stats.empty_files == 1
    (tmp_path / "f.txt").write_bytes(b"")
    docs, stats, _ = _by_units(tmp_path / "f.txt", "text", 4)
    assert docs == [] and stats.empty_files == 1 and stats.files == 1


def test_plan_depends_only_on_names_and_sizes(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"x\n" * 50)
    (tmp_path / "b.txt").write_bytes(b"y\n" * 10)
    sources = readers.parse_input([str(tmp_path / "*.txt")])
    planned = units.plan_units(sources, 32, 10)
    assert [(u.path[-5:], u.start, u.stop) for u in planned] == [
        ("a.txt", 0, 32),
        ("a.txt", 32, 64),
        ("a.txt", 64, 96),
        ("a.txt", 96, 100),
        ("b.txt", 0, 20),
    ]
    assert planned == units.plan_units(sources, 32, 10)
