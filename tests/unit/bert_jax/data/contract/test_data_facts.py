"""The data contract: manifest.json -> the shard list and the data facts the trainer uses.

Hand-written data_prep directories (golden records re-written as shards, manifests as
bert_jax/data/contract/manifest.py documents them, versions 1 and 2) cover every rule; one real
data_prep run checks the rules against the writer as it is.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_jax import cli, storage
from bert_jax.data.contract import data_facts, manifest, record_io, shard_files
from bert_jax.data.contract import features as F
from bert_jax.data.input import pipeline as ip
from configs import default
from support.golden import REPO

GOLDEN = "sample_text.L128.P20.dupe5.tfrecord"  # 60 masked records, L=128, P=20


def unmask(example):
    ids = example[F.INPUT_IDS].copy()
    real = example[F.MASKED_LM_WEIGHTS] > 0
    ids[example[F.MASKED_LM_POSITIONS][real]] = example[F.MASKED_LM_IDS][real]
    return {F.INPUT_IDS: ids, **{k: example[k] for k in F.UNMASKED_FEATURES if k != F.INPUT_IDS}}


def write_dir(directory, testdata, *, masked=True, shards=(2, 1), version=2, **fields):
    """A finished data_prep output: the golden records split into `shards` (train, eval) shards
    and a manifest.json of `version` (fields overridden by `fields`)."""
    os.makedirs(directory, exist_ok=True)
    records = list(record_io.read_records(str(testdata / GOLDEN)))
    if not masked:
        records = [F.encode_example(unmask(F.decode_example(r))) for r in records]
    vocab = str(testdata / "bert-base-uncased-vocab.txt")
    entries, start = {"train": [], "eval": []}, 0
    for split, count in zip(("train", "eval"), shards):
        for i in range(count):
            name = f"{split}-{i:05d}-of-{count:05d}.arrayrecord"
            part = records[start : start + 10]
            start += 10
            with record_io.RecordWriter(os.path.join(directory, name)) as w:
                for r in part:
                    w.write(r)
            entries[split].append(
                {
                    "file": name,
                    "instances": len(part),
                    "md5": storage.md5(os.path.join(directory, name)),
                }
            )
    flags = {"vocab_file": vocab, "do_lower_case": True, "max_seq_length": 128}
    flags.update(max_predictions_per_seq=20, masked_lm_prob=0.15, do_whole_word_mask=False)
    body = {
        "mode": "scaled",
        "format": "arrayrecord",
        "masked": masked,
        "nsp": True,
        "schema": {"max_seq_length": 128, "max_predictions_per_seq": 20 if masked else 0},
        "flags": flags,
        "vocab_md5": storage.md5(vocab),
        "shards": entries,
    }
    if version == 2:
        body.update(
            manifest_version=2,
            whole_word_mask=False,
            vocab={
                "file": vocab,
                "md5": storage.md5(vocab),
                "size": 30522,
                "kind": "wordpiece",
                "do_lower_case": True,
                "special_ids": {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103},
            },
        )
    body.update(fields)
    with open(os.path.join(directory, manifest.FILE), "w") as f:
        json.dump(body, f)
    return str(directory)


def config_for(train_files, eval_files="", **data):
    config = default.get_config()
    config.data.train_files, config.data.eval_files = str(train_files), str(eval_files)
    config.data.read_threads = 1
    config.data.update(data)
    return config


@pytest.fixture(scope="module")
def data_dir(testdata, tmp_path_factory):
    return write_dir(tmp_path_factory.mktemp("records"), testdata)


def test_a_data_prep_directory_is_all_the_config_needs(data_dir, testdata):
    resolved = data_facts.resolve(config_for(data_dir, data_dir))
    d = resolved.data
    assert (d.max_seq_length, d.max_predictions_per_seq, d.dynamic_masking, d.nsp) == (
        128,
        20,
        False,
        True,
    )
    assert (d.vocab_size, resolved.model.vocab_size) == (30522, 30522)
    assert d.vocab_md5 == storage.md5(str(testdata / "bert-base-uncased-vocab.txt"))
    assert (d.cls_token_id, d.sep_token_id, d.mask_token_id, d.do_lower_case) == (
        101,
        102,
        103,
        True,
    )
    assert d.manifests == os.path.join(data_dir, manifest.FILE)
    train = shard_files.find_shards(data_dir, "train")
    assert [os.path.basename(f) for f in train.files] == [
        "train-00000-of-00002.arrayrecord",
        "train-00001-of-00002.arrayrecord",
    ]
    batch = next(iter(ip.train_dataset(d, 30522, 4, seed=0)))
    assert batch[F.INPUT_IDS].shape == (4, 128) and batch[F.MASKED_LM_IDS].shape == (4, 20)
    evals = ip.eval_batches(d, d.eval_files, 30522, 4)
    assert sum(b[ip.EXAMPLE_WEIGHT].sum() for b in evals) == 10  # the eval split's one shard


def test_stray_and_temporary_files_are_never_read(data_dir, tmp_path):
    """The issue's case: `train-*` on a directory where a writer left a .tmp-PID file."""
    work = shutil.copytree(data_dir, tmp_path / "records")
    (work / "train-00000-of-00002.arrayrecord.tmp-4242").write_bytes(b"half a shard")
    shutil.copy(work / "train-00000-of-00002.arrayrecord", work / "train-copy.arrayrecord")
    for pattern in ("train-*", "train-*.arrayrecord", "*"):
        if pattern == "*":
            with pytest.raises(cli.UserError, match="matches both train and eval shards"):
                shard_files.find_shards(str(work / pattern))
            continue
        shards = shard_files.find_shards(str(work / pattern))
        assert [os.path.basename(f) for f in shards.files] == [
            "train-00000-of-00002.arrayrecord",
            "train-00001-of-00002.arrayrecord",
        ]
        assert shards.instances == [10, 10]
    one = shard_files.find_shards(str(work / "train-00001-*"))  # a glob picks listed shards
    assert [os.path.basename(f) for f in one.files] == ["train-00001-of-00002.arrayrecord"]
    with pytest.raises(cli.UserError, match="matches none of the shards"):
        shard_files.find_shards(str(work / "wiki-*"))


def test_globs_into_one_directory_read_its_manifest_once(data_dir, monkeypatch):
    reads, read = [], manifest.read
    monkeypatch.setattr(manifest, "read", lambda path: reads.append(path) or read(path))
    shards = shard_files.find_shards(f"{data_dir}/train-00000-*,{data_dir}/train-00001-*")
    assert [os.path.basename(f) for f in shards.files] == [
        "train-00000-of-00002.arrayrecord",
        "train-00001-of-00002.arrayrecord",
    ]
    assert reads == [os.path.join(data_dir, manifest.FILE)] and len(shards.manifests) == 1


def test_an_unfinished_data_prep_job_is_an_error_that_says_to_rerun_it(data_dir, tmp_path):
    """The issue's case: a killed job's directory, read with `train-*.arrayrecord`, trained on
    the shards that happened to be there, with no warning."""
    work = shutil.copytree(data_dir, tmp_path / "records")
    os.remove(work / manifest.FILE)
    for files in (str(work), str(work / "train-*.arrayrecord"), str(work / "train-*")):
        with pytest.raises(cli.UserError, match=r"no manifest.json: its data_prep job has not"):
            data_facts.resolve(config_for(files, max_seq_length=128, max_predictions_per_seq=20))


def test_a_missing_or_cut_shard_is_an_error_naming_it(data_dir, tmp_path, testdata):
    work = shutil.copytree(data_dir, tmp_path / "records")
    os.remove(work / "train-00001-of-00002.arrayrecord")
    with pytest.raises(cli.UserError, match=r"train-00001-of-00002.arrayrecord is listed in .*"):
        data_facts.resolve(config_for(work))
    # Rewritten with fewer records (a copy cut short and re-framed): the count gives it away.
    with record_io.RecordWriter(str(work / "train-00001-of-00002.arrayrecord")) as w:
        for r in list(record_io.read_records(str(testdata / GOLDEN)))[:3]:
            w.write(r)
    d = data_facts.resolve(config_for(work)).data
    with pytest.raises(ValueError, match=r"train-00001-of-00002.arrayrecord holds 3 records, its"):
        ip.train_dataset(d, 30522, 4, seed=0)
    # verify_md5 runs data_prep --verify's check (shard_files.shard_problem), naming the shard.
    with pytest.raises(
        cli.UserError,
        match=r"/train-00001-of-00002.arrayrecord: md5 differs from the manifest \(corrupt or "
        r"changed\); rerun data_prep",
    ):
        data_facts.resolve(config_for(work, verify_md5=True))


def test_a_conflicting_config_value_is_an_error_naming_both(data_dir):
    for field, value, says in (
        ("max_seq_length", 512, "max_seq_length=128"),
        ("max_predictions_per_seq", 76, "max_predictions_per_seq=20"),
        ("dynamic_masking", True, "dynamic_masking=False"),
        ("mask_token_id", 4, "mask_token_id=103"),
        ("vocab_size", 8000, "vocab_size=30522"),
    ):
        with pytest.raises(
            cli.UserError, match=rf"config.data.{field}={value!r} conflicts with .*says {says}"
        ):
            data_facts.resolve(config_for(data_dir, **{field: value}))
    # The same values as the manifest's are fine; the model may pad the table, not shrink it.
    config = config_for(data_dir, max_seq_length=128, max_predictions_per_seq=20)
    config.model.vocab_size = 30528
    assert data_facts.resolve(config).model.vocab_size == 30528
    config.model.vocab_size = 30000
    with pytest.raises(cli.UserError, match=r"model.vocab_size=30000 is smaller than .*30522"):
        data_facts.resolve(config)


def test_special_ids_and_dynamic_masking_come_from_the_manifest(testdata, tmp_path):
    """The issue's case: a vocabulary trained with data_prep.vocab puts [CLS]/[SEP]/[MASK] at
    other ids than bert-base-uncased's 101/102/103, which the config used to hard-code."""
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    directory = write_dir(tmp_path / "records", testdata, masked=False)
    with open(os.path.join(directory, manifest.FILE)) as f:
        body = json.load(f)
    body["vocab"]["special_ids"] = special
    with open(os.path.join(directory, manifest.FILE), "w") as f:
        json.dump(body, f)
    d = data_facts.resolve(config_for(directory)).data
    assert d.dynamic_masking is True and d.max_predictions_per_seq == 20  # data_prep's budget
    assert (d.cls_token_id, d.sep_token_id, d.mask_token_id) == (2, 3, 4)
    batch = next(iter(ip.train_dataset(d, 30522, 20, seed=0)))
    masked = batch[F.INPUT_IDS] == 4
    assert masked.sum() > 100 and not (batch[F.INPUT_IDS] == 103).any()


def test_version_1_manifests_still_read(testdata, tmp_path):
    """data_prep before the contract: no manifest_version, vocab, whole_word_mask; reference
    mode also without schema and nsp. Size and special ids come from the vocabulary file."""
    directory = write_dir(tmp_path / "records", testdata, version=1, mode="reference")
    with open(os.path.join(directory, manifest.FILE)) as f:
        body = json.load(f)
    for key in ("schema", "nsp"):
        del body[key]
    with open(os.path.join(directory, manifest.FILE), "w") as f:
        json.dump(body, f)
    d = data_facts.resolve(config_for(directory)).data
    assert (d.max_seq_length, d.max_predictions_per_seq, d.nsp, d.dynamic_masking) == (
        128,
        20,
        True,
        False,
    )
    assert (d.vocab_size, d.cls_token_id, d.mask_token_id) == (30522, 101, 103)


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_whole_word_masking_under_its_old_name_still_reads(testdata, tmp_path, whole_word_mask):
    """Version 1 recorded whole-word masking only as data_prep's flag (`do_whole_word_mask` in
    `flags`); it reads as the one name, `whole_word_mask`, and becomes the run's default for
    dynamic masking. A version-2 manifest's top-level field wins over its flags."""
    directory = write_dir(tmp_path / "v1", testdata, version=1, masked=False)
    with open(os.path.join(directory, manifest.FILE)) as f:
        body = json.load(f)
    body["flags"]["do_whole_word_mask"] = whole_word_mask
    with open(os.path.join(directory, manifest.FILE), "w") as f:
        json.dump(body, f)
    assert manifest.read(directory)["whole_word_mask"] is whole_word_mask
    resolved = data_facts.resolve(config_for(directory)).data
    assert resolved.whole_word_mask is whole_word_mask
    v2 = write_dir(tmp_path / "v2", testdata, masked=False, whole_word_mask=whole_word_mask)
    with open(os.path.join(v2, manifest.FILE)) as f:
        body = json.load(f)
    body["flags"]["do_whole_word_mask"] = not whole_word_mask  # the flag a v2 writer also kept
    with open(os.path.join(v2, manifest.FILE), "w") as f:
        json.dump(body, f)
    assert manifest.read(v2)["whole_word_mask"] is whole_word_mask


def test_records_without_a_manifest_need_the_config_values(testdata):
    golden = str(testdata / GOLDEN)
    with pytest.raises(
        cli.UserError, match=r"have no manifest.json to say what they are: set --config.data.max"
    ):
        data_facts.resolve(config_for(golden))
    config = config_for(golden, max_seq_length=128, max_predictions_per_seq=20)
    with pytest.raises(cli.UserError, match=r"set --config.model.vocab_size"):
        data_facts.resolve(config)
    config.model.vocab_size = 30522
    d = data_facts.resolve(config).data
    assert (d.dynamic_masking, d.nsp) == (False, True)  # the original generator's records
    assert next(iter(ip.train_dataset(d, 30522, 4, seed=0)))[F.INPUT_IDS].shape == (4, 128)


def test_token_ids_past_the_vocabulary_name_the_id_and_file(data_dir, tmp_path, testdata):
    work = shutil.copytree(data_dir, tmp_path / "records")
    shard = str(work / "train-00001-of-00002.arrayrecord")
    records = list(record_io.read_records(shard))
    bad = F.decode_example(records[7])
    bad[F.INPUT_IDS][5] = 30600
    records[7] = F.encode_example(bad)
    with record_io.RecordWriter(shard) as w:
        for r in records:
            w.write(r)
    d = data_facts.resolve(config_for(work)).data
    it = iter(ip.train_dataset(d, 30522, 20, seed=0))
    with pytest.raises(
        ValueError,
        match=r"train-00001-of-00002.arrayrecord \(record 7\): input_ids holds token id 30600, "
        r"outside the vocabulary of 30522 ids",
    ):
        next(it)


def test_a_real_data_prep_run_is_read(testdata, tmp_path, vocab_file):
    """Whatever manifest version the data_prep of this tree writes, the reader takes it."""
    out = tmp_path / "records"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.main",
            f"--input={testdata / 'sample_text.txt'}",
            f"--vocab_file={vocab_file}",
            f"--output_dir={out}",
            "--dupe_factor=2",
            "--num_workers=1",
            "--noprogress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    d = data_facts.resolve(config_for(out)).data
    assert (d.max_seq_length, d.max_predictions_per_seq, d.dynamic_masking) == (128, 20, False)
    assert (d.vocab_size, d.cls_token_id, d.sep_token_id, d.mask_token_id) == (30522, 101, 102, 103)
    batch = next(iter(ip.train_dataset(d, 30522, 2, seed=0)))
    assert np.asarray(batch[F.INPUT_IDS]).max() < 30522


def test_a_shard_named_twice_under_any_spelling_is_an_error(data_dir, tmp_path, monkeypatch):
    # The same shard twice ("d" and "d/./train-*", a relative path, a link) was read twice an
    # epoch in silence: its records trained on, and scored in the eval, at double weight.
    os.symlink(data_dir, tmp_path / "link")
    monkeypatch.chdir(os.path.dirname(data_dir))
    shard = "train-00001-of-00002.arrayrecord"
    relative = os.path.basename(data_dir)
    for other in (
        f"{data_dir}/./{shard}",
        f"{data_dir}//{shard}",
        f"{relative}/{shard}",
        f"{tmp_path}/link/{shard}",
        f"{tmp_path}/link",
        f"{data_dir}/../{relative}/train-*",
    ):
        for spec in (f"{data_dir},{other}", f"{other},{data_dir}/train-*"):
            with pytest.raises(cli.UserError, match=r"names the record file .* twice"):
                shard_files.find_shards(spec)
    assert len(shard_files.find_shards(f"{data_dir}/train-00000-*,{relative}/{shard}").files) == 2
