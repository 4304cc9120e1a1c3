"""Corpus readers: BERT text files (globs, gzip), JSONL, TFDS, and bad input counted not fatal."""

import gzip
import json

import pytest

from data_prep import readers


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
    with pytest.raises(readers.InputError, match="not a readable file"):
        readers.parse_input([str(tmp_path / "nope.txt")])
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
    assert readers.split_sentences(text) == sentences


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
    assert len(docs) == 2 and stats.documents == 2
    assert sorted(docs)[0] == ["Article 0 begins.", "It goes on.", "A paragraph 0!"]
    with pytest.raises(readers.InputError, match="no field 'body'"):
        _docs(["tfds:tiny_wiki:test"], tfds_data_dir=str(tmp_path), text_field="body")
    with pytest.raises(readers.InputError, match="cannot open TFDS dataset"):
        _docs(["tfds:tiny_wiki_missing"], tfds_data_dir=str(tmp_path))
