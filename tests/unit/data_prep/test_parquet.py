"""Parquet inputs in the Hugging Face hub's layouts: row-group units give the whole file's rows,
one document each; a missing column or a damaged file is an error naming it."""

import os

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from data_prep import readers, units  # noqa: E402
from support.golden import REPO  # noqa: E402

SAMPLE = os.path.join(REPO, "examples", "data", "enwiki-sample.parquet")


def _wikipedia(path, rows=50, row_group_size=7):
    """wikimedia/wikipedia's columns: id, url, title, text (paragraphs at blank lines)."""
    texts = [
        f"Article {i} is a town. It has {i} people.\n\nIts mayor is Dr. Smith {i}."
        for i in range(rows)
    ]
    texts[3] = ""  # an empty article: no document
    table = pa.table(
        {
            "id": [str(i) for i in range(rows)],
            "url": [f"https://en.wikipedia.org/wiki/A{i}" for i in range(rows)],
            "title": [f"Article {i}" for i in range(rows)],
            "text": texts,
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
    return [
        [f"Article {i} is a town.", f"It has {i} people.", f"Its mayor is Dr. Smith {i}."]
        for i in range(rows)
        if i != 3
    ]


def _units(path, block_bytes, text_field="text"):
    stats = readers.ReadStats()
    planned = units.plan_units(
        readers.parse_input([str(path)]), block_bytes, 10, text_field=text_field
    )
    return [d for u in planned for d in units.read_unit(u, stats, text_field)], stats, planned


def test_rows_are_documents_at_any_unit_size(tmp_path):
    expected = _wikipedia(tmp_path / "wiki.parquet")
    stats = readers.ReadStats()
    (source,) = readers.parse_input([str(tmp_path / "wiki.parquet")])
    assert source.kind == "parquet"
    assert list(readers.documents(source, stats)) == expected and stats.documents == 49
    groups = pq.ParquetFile(tmp_path / "wiki.parquet").metadata.num_row_groups
    for block in (1, 2000, 1 << 30):
        docs, unit_stats, planned = _units(tmp_path / "wiki.parquet", block)
        assert docs == expected and unit_stats == stats, block
        assert planned[0].start == 0 and planned[-1].stop == groups
        assert sum(u.size for u in planned) > 0 and len({u.extent for u in planned}) == 1
    assert len(_units(tmp_path / "wiki.parquet", 1)[2]) == groups == 8  # a unit per row group


def test_bookcorpus_layout_and_text_field(tmp_path):
    pq.write_table(
        pa.table({"text": ["one sentence here.", None, "two. three."]}), tmp_path / "b.pq"
    )
    docs, _, _ = _units(tmp_path / "b.pq", 1 << 20)
    assert docs == [["one sentence here."], ["two.", "three."]]
    _wikipedia(tmp_path / "w.parquet", rows=5)
    docs, _, _ = _units(tmp_path / "w.parquet", 1 << 20, text_field="title")
    assert docs == [[f"Article {i}"] for i in range(5)]
    with pytest.raises(readers.InputError, match=r"w.parquet.*no column 'body'.*'title'"):
        _units(tmp_path / "w.parquet", 1 << 20, text_field="body")


def test_a_damaged_parquet_file_is_an_error(tmp_path):
    _wikipedia(tmp_path / "w.parquet")
    data = (tmp_path / "w.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(readers.InputError, match=r"cut.parquet.*not a readable Parquet file"):
        _units(tmp_path / "cut.parquet", 1 << 20)


def test_the_sample_in_huggingface_layout():
    table = pq.read_table(SAMPLE)
    assert table.column_names == ["id", "url", "title", "text"] and table.num_rows == 32
    docs, stats, planned = _units(SAMPLE, 20_000)
    assert len(planned) > 1 and stats.documents == 32 and sum(map(len, docs)) > 1000


def test_text_column_types(tmp_path):
    """Strings, large strings, dictionary-encoded strings and UTF-8 bytes are text (bytes that are
    not UTF-8 are counted, as in text files); a column of numbers or lists is an error naming the
    text columns, not an empty corpus."""
    texts = ["one here. two here.", "three here."]
    expected = [["one here.", "two here."], ["three here."]]
    for name, column in {
        "string": pa.array(texts),
        "large_string": pa.array(texts, type=pa.large_string()),
        "dictionary": pa.array(texts).dictionary_encode(),
        "binary": pa.array([t.encode() for t in texts], type=pa.binary()),
    }.items():
        pq.write_table(pa.table({"text": column}), tmp_path / f"{name}.parquet")
        docs, stats, _ = _units(tmp_path / f"{name}.parquet", 1 << 20)
        assert docs == expected and stats.bad_utf8_lines == 0, name
    pq.write_table(pa.table({"text": pa.array([b"caf\xe9 ok."])}), tmp_path / "latin1.parquet")
    docs, stats, _ = _units(tmp_path / "latin1.parquet", 1 << 20)
    assert docs == [["caf\ufffd ok."]] and stats.bad_utf8_lines == 1
    pq.write_table(pa.table({"text": [1, 2], "body": ["a", "b"]}), tmp_path / "ints.parquet")
    with pytest.raises(readers.InputError, match=r"'text' holds int64, not text.*\['body'\]"):
        _units(tmp_path / "ints.parquet", 1 << 20)
    pq.write_table(pa.table({"text": [["a"], ["b"]]}), tmp_path / "lists.parquet")
    with pytest.raises(readers.InputError, match=r"'text' holds list<"):
        list(
            readers.documents(
                readers.parse_input([str(tmp_path / "lists.parquet")])[0], readers.ReadStats()
            )
        )


def test_a_string_column_with_bytes_that_are_not_utf8_reads_as_a_binary_one(tmp_path):
    """Writers that do not check UTF-8 (pyarrow's from_buffers, some JVM writers) leave bad bytes
    in string columns; Python's str refuses them, which stopped the job with a traceback. Such a
    column now reads as the same bytes in a binary column do: bad bytes replaced and counted."""
    import random

    import numpy as np

    rng = random.Random(0)
    pieces = [
        b"Word ",
        b"caf\xe9 ",
        b"\xed\xa0\x80",
        b"\xff",
        b"\xe4\xb8",
        b"ok. ",
        "\u4e2d ".encode(),
    ]
    rows = [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(300)]
    offsets = np.cumsum([0, *map(len, rows)])
    data = pa.py_buffer(b"".join(rows))
    strings = {
        "string": pa.StringArray.from_buffers(
            len(rows), pa.py_buffer(offsets.astype(np.int32).tobytes()), data
        ),
        "large_string": pa.LargeStringArray.from_buffers(
            len(rows), pa.py_buffer(offsets.astype(np.int64).tobytes()), data
        ),
    }
    pq.write_table(pa.table({"text": pa.array(rows, pa.binary())}), tmp_path / "binary.parquet")
    expected, expected_stats, _ = _units(tmp_path / "binary.parquet", 1 << 20)
    assert expected_stats.bad_utf8_lines > 100
    for name, column in strings.items():
        for encoded in (column, column.dictionary_encode()):
            path = tmp_path / f"{name}.parquet"
            pq.write_table(pa.table({"text": encoded}), path, row_group_size=64)
            docs, stats, _ = _units(path, 1000)
            assert docs == expected and stats == expected_stats, (name, encoded.type)
