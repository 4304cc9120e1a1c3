"""Wikipedia dumps, Parquet files and books through the whole scaled job: the records decode back
to the articles' text with no markup, the output does not depend on the worker count, a job
stopped mid-way resumes to the same output, and the README's worked example runs as written."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest, record_io
from bert_jax.text import tokenization
from data_prep import job, job_units, scaled
from support import make_wiki_dump
from support.golden import REPO

pytest.importorskip("pyarrow")

ARTICLES = 30


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpora")
    pages, expected = make_wiki_dump.build(ARTICLES, seed=3)
    dump = d / "gen-pages-articles-multistream.xml.bz2"
    make_wiki_dump.write_dump(pages, str(dump), pages_per_stream=4)
    make_wiki_dump.write_parquet(pages, str(d / "gen.parquet"), row_group_rows=4)
    (d / "book-a.txt").write_text("The first book opens. Rain falls.\nThe end of book one.\n")
    (d / "book-b.txt").write_text("A second book. It is short.\n")
    return d, expected


def _spec(d, **kwargs):
    return job.JobSpec(
        inputs=(str(d / "gen-pages-articles-multistream.xml.bz2"), str(d / "gen.parquet")),
        opts=job.inst.InstanceOptions(mask=False),  # unmasked: the records hold the text itself
        dupe_factor=2,
        eval_fraction=0.1,
        block_size_mb=3000 / 2**20,  # several streams and row groups per unit, many units
        num_shards=3,
        **kwargs,
    )


def _records(directory, written):
    for split in ("train", "eval"):
        for entry in written["shards"][split]:
            yield from record_io.read_records(str(directory / entry["file"]))


def _shards(directory):
    return {
        n: (directory / n).read_bytes() for n in os.listdir(directory) if n[:5] in "train-eval-"
    }


@pytest.fixture(scope="module")
def tok(vocab_file):
    return tokenization.WordPieceTokenizer(vocab_file)  # seconds to build: once per module


@pytest.fixture(scope="module")
def uninterrupted(corpora, tok, tmp_path_factory):
    d, _ = corpora
    out = tmp_path_factory.mktemp("whole")
    return out, scaled.run(_spec(d), tok, str(out), progress=False)


def test_records_decode_back_to_every_article_with_no_markup(corpora, uninterrupted, tok):
    d, expected = corpora
    out, written = uninterrupted
    read = written["read"]
    assert read["documents"] == written["documents"] == 2 * ARTICLES  # dump + Parquet rows
    assert read["pages"] > ARTICLES and read["skipped_pages"] == read["pages"] - ARTICLES
    assert len(job.plan(_spec(d))) > 4
    seen, words = set(), []
    for raw in _records(out, written):
        record = F.decode_example(raw)
        ids = record[F.INPUT_IDS][: int(record[F.INPUT_MASK].sum())]
        pieces = [tok.vocab_words[i] for i in ids if i not in (tok.cls_id, tok.sep_id)]
        text = " ".join(pieces).replace(" ##", "")
        words.append(text)
        seen.update(int(n) for n in re.findall(r"article (\d+)", text))
    assert seen == set(range(ARTICLES))  # every article made it into the records
    markup = [t for t in words if re.search(r"[{}\[\]|<>=]|ref |thumb|category|infobox", t)]
    assert not markup, markup[:3]
    expected_text = "".join(s for doc in expected.values() for s in doc).lower().replace(" ", "")
    for text in words[:50]:  # decoded spans are runs of the expected sentences
        assert text[:40].replace(" ", "") in expected_text, text


def test_worker_count_does_not_change_the_output(corpora, uninterrupted, tmp_path, vocab_file):
    d, _ = corpora
    out, written = uninterrupted
    spec = _spec(d)
    rc, printed = _cli(
        f"--input={','.join(spec.inputs)}",
        f"--vocab_file={vocab_file}",
        f"--output_dir={tmp_path}",
        "--num_workers=2",
        "--dynamic_masking",
        "--dupe_factor=2",
        "--eval_fraction=0.1",
        f"--block_size_mb={spec.block_size_mb!r}",
        "--num_shards=3",
        "--progress=false",
    )
    assert rc == 0, printed
    assert _shards(tmp_path) == _shards(out)
    assert f"wiki pages: {written['read']['pages']} read" in printed
    # The sentences removed markup left broken (three an article: a display formula, a list's
    # introduction, a sentence holding <math>) are counted in the manifest and the summary.
    assert written["read"]["dropped_sentences"] == 3 * ARTICLES
    assert f"0 repaired (a leading comma), {3 * ARTICLES} dropped" in printed
    assert json.load(open(tmp_path / "manifest.json"))["flags"]["language"] == "en"


def test_a_stopped_job_resumes_to_the_same_output(
    corpora, uninterrupted, tmp_path, tok, monkeypatch
):
    d, _ = corpora
    out, written = uninterrupted
    process, done = job_units.UnitProcessor.process, []

    def stop_after_three(self, unit, *args):
        if len(done) == 3:
            raise KeyboardInterrupt  # as a Ctrl-C mid-job
        done.append(unit.index)
        return process(self, unit, *args)

    monkeypatch.setattr(job_units.UnitProcessor, "process", stop_after_three)
    with pytest.raises(KeyboardInterrupt):
        scaled.run(_spec(d), tok, str(tmp_path), progress=False)
    monkeypatch.setattr(job_units.UnitProcessor, "process", process)
    assert len(os.listdir(tmp_path / manifest.WORK_DIR / "units")) == 6  # 3 units' records, markers
    resumed = scaled.run(_spec(d), tok, str(tmp_path), progress=False)
    assert _shards(tmp_path) == _shards(out) and resumed["stats"] == written["stats"]
    # The fingerprint holds what the plan saw of the dump (and its index) and the Parquet file.
    inputs = written["fingerprint"]["units"]["inputs"]
    dump = d / "gen-pages-articles-multistream.xml.bz2"
    index = d / "gen-pages-articles-multistream-index.txt.bz2"
    size = os.path.getsize
    assert inputs[str(dump)] == f"{size(dump)} bytes, index {size(index)} bytes"
    assert re.fullmatch(r"\d+ bytes, 8 row groups, 30 rows", inputs[str(d / "gen.parquet")])


def test_books_are_one_document_per_file(corpora, tmp_path, tok):
    d, _ = corpora
    spec = job.JobSpec(
        inputs=(str(d / "book-*.txt"),), document_per_file=True, dupe_factor=1, eval_fraction=0
    )
    assert [u.kind for u in job.plan(spec)] == ["book", "book"]
    written = scaled.run(spec, tok, str(tmp_path), progress=False)
    assert written["documents"] == 2 and written["read"]["lines"] == 3


def _cli(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_utf16_input_is_refused_by_the_binary(tmp_path, vocab_file):
    (tmp_path / "utf16.txt").write_text("A sentence.\nAnother.\n", encoding="utf-16")
    rc, out = _cli(
        f"--input={tmp_path / 'utf16.txt'}",
        f"--vocab_file={vocab_file}",
        f"--output_dir={tmp_path}/o",
    )
    assert rc == 2 and "utf16.txt" in out and "UTF-16" in out and "Traceback" not in out


def _readme_commands():
    """The commands of README.md's Wikipedia/Parquet example, continuation lines joined."""
    readme = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = readme.split("### From a Wikipedia dump", 1)[1].split("\n## ", 1)[0]
    block = "\n".join(re.findall(r"```bash\n(.*?)```", section, re.S))
    commands, current = [], ""
    for line in block.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return [c for c in commands if c.startswith("python -m data_prep.")]


def test_the_readme_example_runs_as_written(tmp_path):
    commands = _readme_commands()
    assert len(commands) >= 2
    for command in commands:
        args = shlex.split(command.replace("/tmp/", f"{tmp_path}/"))
        proc = subprocess.run(
            [sys.executable, *args[1:]], capture_output=True, text=True, cwd=REPO, timeout=300
        )
        assert proc.returncode == 0, (command, proc.stdout + proc.stderr)
        if "data_prep.main" in command and "--verify" not in command:
            assert "wrote" in proc.stdout, proc.stdout
