"""Issues 12, 23 and 34's sweep: over 300 hostile or careless inputs across all eight binaries.

Each case is a command line as a user types it. A mistake must give exit status 2, nothing on
stdout and exactly one stderr line, `error: ...`, naming the file or flag at fault (no traceback,
no usage dump, no screen of logs). Where the right answer is to go on (a UTF-8 byte-order mark,
CRLF line ends, a gzip file without .gz), the case must exit 0 with the right result, checked.

The binaries run in children forked from one process that imported the heavy libraries once
(tests/support/forkrun.py): a process start per case would cost ~8 minutes of CI; the first tests
check that a forked child answers exactly as `python -m` does.
"""

import bz2
import gzip
import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from bert_jax import storage
from bert_jax.data.contract import manifest
from support import (
    sweep_buckets,
    sweep_checkpoints,
    sweep_inputs,
    sweep_integrity,
    sweep_plan,
    sweep_runs,
    sweep_signals,
)
from support.golden import REPO

RECORD_FLAGS = ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=1"]


@pytest.fixture(scope="module")
def server(forkserver):
    return forkserver


def _write(path, data) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w", encoding=None) as f:
        f.write(data)
    return str(path)


def _text_files(d, corpus: str) -> None:
    """Hostile and careless text inputs, all made from the same `corpus`."""
    rng = random.Random(12)
    raw = corpus.encode()
    accented = "Café résumé naïve façade, déjà vu.\n\nÀ la carte crème brûlée.\n" * 40
    files = {
        "corpus.txt": raw,
        "bom.txt": b"\xef\xbb\xbf" + raw,
        "crlf.txt": raw.replace(b"\n", b"\r\n"),
        "gzip-named.txt": gzip.compress(raw, mtime=0),
        "utf16.txt": corpus.encode("utf-16"),
        "utf16be.txt": b"\xfe\xff" + corpus.encode("utf-16-be"),
        "utf16-nobom.txt": corpus.encode("utf-16-le"),
        "utf32.txt": corpus.encode("utf-32"),
        "latin1.txt": accented.encode("latin-1"),
        "nul.txt": raw.replace(b" ", b"\x00"),
        "random.bin": rng.randbytes(40_000),
        "fake.gz": raw,
        "truncated.gz": gzip.compress(raw, mtime=0)[: len(raw) // 8],
        "utf16.gz": gzip.compress(corpus.encode("utf-16"), mtime=0),
        "plain.bz2": bz2.compress(raw),
        "empty.txt": b"",
        "blank.txt": b"\n \n\t\n\n",
        "bad.jsonl": "".join(json.dumps({"text": line}) + "\n" for line in corpus.splitlines())
        .encode()
        .replace(b'"}\n', b"\n", 1),
        "nofield.jsonl": b'{"body": "the text is under another name."}\n' * 20,
        "text.parquet": raw,
        "text.tfrecord": raw,
        "text.arrayrecord": raw,
        "empty.tfrecord": b"",
        "not_a_dir": b"a file\n",
        "dir/inside.txt": raw,
        "clean.txt": b"Hello, world!\n\nThe naive cafe.\n",
        "crlf_bom.txt": b"\xef\xbb\xbfHello, world!\r\n\r\nThe naive cafe.\r\n",
    }
    for name, data in files.items():
        _write(d / name, data)


def _vocab_files(d, vocab_file: str) -> None:
    with open(vocab_file, encoding="utf-8") as f:
        entries = f.read().splitlines()
    _write(d / "vocab_empty.txt", b"")
    _write(d / "vocab_200.txt", "\n".join(entries[:200]) + "\n")
    _write(d / "vocab_nomask.txt", "\n".join(e for e in entries if e != "[MASK]") + "\n")
    _write(d / "vocab_utf16.txt", ("\n".join(entries) + "\n").encode("utf-16"))
    _write(d / "vocab_crlf.txt", "\r\n".join(entries) + "\r\n")
    _write(d / "vocab.bin", random.Random(3).randbytes(30_000))


def _records_variants(d) -> None:
    """Copies of a finished data_prep output, each broken as a kill, a copy or a user breaks it."""
    records = d / "records"
    m = manifest.read(str(records / "manifest.json"))
    shard = m["shards"]["train"][0]["file"]
    for name in ("missing", "tmp", "badmd5", "nomanifest", "cut", "morevocab", "noeval"):
        shutil.copytree(records, d / f"rec_{name}")
    os.remove(d / "rec_missing" / shard)
    _write(d / "rec_tmp" / f"{shard}.tmp-4242", b"half a shard")
    path = d / "rec_badmd5" / shard
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    os.remove(d / "rec_nomanifest" / "manifest.json")
    _write(d / "rec_nomanifest" / f"{shard}.tmp-77", b"half")
    path = d / "rec_cut" / shard
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    doc = json.loads((d / "rec_morevocab" / "manifest.json").read_text())
    doc["vocab"]["size"] = 50_000  # data tokenized with a larger vocabulary than tiny's model
    (d / "rec_morevocab" / "manifest.json").write_text(json.dumps(doc))
    doc = json.loads((d / "rec_noeval" / "manifest.json").read_text())
    doc["shards"]["eval"] = []  # a training-only output named as the eval data too
    (d / "rec_noeval" / "manifest.json").write_text(json.dumps(doc))


def _finetune_files(d) -> None:
    good = "sentence\tlabel\n" + "".join(
        f"{w} movie\t{int(w == 'good')}\n" for w in ["good", "bad"] * 8
    )
    files = {
        "sst_good.tsv": good,
        "sst_empty.tsv": "",
        "sst_header.tsv": "sentence\tlabel\n",
        "sst_ragged.tsv": good + "a row with no label\n",
        "sst_labels.tsv": good + "an odd one\t7\n",
        "sst_spaces.tsv": good.replace("\t1\n", "\t1 \n"),
        "sst_noheader.tsv": good.split("\n", 1)[1],
        "squad_not.json": json.dumps({"version": "v1.1", "rows": [1, 2, 3]}),
        "squad_broken.json": '{"version": "v1.1", "data": [',
        "bad.conll": "EU B-ORG\nrejects\nGerman B-MISC\n\n",
        "good.conll": "EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn I-PER\n",
    }
    for name, text in files.items():
        _write(d / "ft" / name, text)


@pytest.fixture(scope="module")
def world(tmp_path_factory, server, testdata, vocab_file, save_checkpoint, flip_bytes):
    """Every file the cases name, under one directory; placeholders for the case arguments."""
    from flax import nnx

    from bert_jax.hf import bert
    from bert_jax.model import encoder as M
    from configs import tiny

    d = tmp_path_factory.mktemp("sweep")
    lines = (testdata / "pydocs_small.txt").read_text(encoding="utf-8").splitlines()[:500]
    _text_files(d, "\n".join(lines) + "\n")
    _vocab_files(d, vocab_file)
    status, _, err = server.run(
        "data_prep.main",
        [
            f"--input={d / 'corpus.txt'}",
            f"--vocab_file={vocab_file}",
            f"--output_dir={d / 'records'}",
            "--num_workers=1",
            "--progress=false",
            "--eval_fraction=0.2",
            "--num_shards=2",
            "--num_eval_shards=1",
            *RECORD_FLAGS,
        ],
    )
    assert status == 0, err
    _records_variants(d)
    _finetune_files(d)

    config = tiny.get_config()
    config.data.vocab_file = vocab_file
    config.data.vocab_md5 = storage.md5(vocab_file)
    config.data.do_lower_case = True
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(0))
    save_checkpoint(d / "run", model, config, step=4)
    shutil.copytree(d / "run", d / "run_damaged")
    flip_bytes(d / "run_damaged" / "checkpoints" / "4")
    bert.save_hf(model, vocab_file, str(d / "hf"))
    shard = manifest.read(str(d / "records" / "manifest.json"))["shards"]["train"][0]["file"]
    more = sweep_integrity.make_files(d, server, vocab_file)
    sweep_inputs.make_files(d)
    runs = sweep_runs.make_files(d, model, config, save_checkpoint, vocab_file)
    runs.update(sweep_signals.make_files(d))
    runs.update(sweep_checkpoints.make_files(d))
    return {"d": d, "vocab": vocab_file, "shard": shard, **more, **runs}


# --- the cases ------------------------------------------------------------------------------
# A case is (id, command line, expected): the command line is split on spaces after filling in
# {d} (the fixture's directory), {o} (the case's own empty directory), {vocab} (bert-base-uncased's
# vocab.txt) and {shard} (the first training shard's name). Expected is what the error line must
# name (the file or flag at fault), or for an input that must work a check(ctx, o, stdout).


def _same_records(ctx, o, stdout):
    """data_prep's output is the fixture's, made from the clean corpus with the same flags."""
    want = manifest.read(str(ctx["d"] / "records" / "manifest.json"))["shards"]
    got = manifest.read(os.path.join(o, "out", "manifest.json"))["shards"]
    assert [s["md5"] for s in got["train"]] == [s["md5"] for s in want["train"]]


def _counted(what):
    def check(ctx, o, stdout):
        assert what in stdout, stdout  # the summary says what was skipped

    return check


def _decoded_as_with_lf_vocab(ctx, o, stdout):
    args = f"--input={ctx['d']}/records/{ctx['shard']} --vocab_file={ctx['vocab']} --limit=2"
    assert "--- record 1" in stdout
    assert (0, stdout, "") == ctx["server"].run("data_prep.decode", args.split())


def _vocab_without_bom(ctx, o, stdout):
    with open(os.path.join(o, "v.txt"), encoding="utf-8") as f:
        entries = f.read().splitlines()
    assert entries[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(entries) == 300
    assert not any("\ufeff" in e for e in entries)


def _exported(ctx, o, stdout):
    from bert_jax.hf import bert

    assert stdout.startswith("exported step 4 ")
    config = json.loads(open(os.path.join(o, "hf", "config.json")).read())
    assert config["vocab_size"] == 30522 and config["hidden_size"] == 32
    assert open(os.path.join(o, "hf", "vocab.txt")).read() == open(ctx["vocab"]).read()
    assert bert.load_hf(os.path.join(o, "hf")) is not None


def _same_embeddings(ctx, o, stdout):
    """A BOM and CRLF line ends change nothing: the rows are those of the clean file."""
    import numpy as np

    args = f"--model={ctx['d']}/hf --input={ctx['d']}/clean.txt --output={o}/clean.npz"
    status, _, err = ctx["server"].run("bert_jax.embed", [*args.split(), "--max_seq_length=16"])
    assert status == 0, err
    got, want = np.load(os.path.join(o, "e.npz")), np.load(os.path.join(o, "clean.npz"))
    assert got["input_ids"].shape[0] == 3
    for key in want.files:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


PREP = (
    "--vocab_file={vocab} --output_dir={o}/out --num_workers=1 --progress=false "
    "--eval_fraction=0.2 --num_shards=2 --num_eval_shards=1 " + " ".join(RECORD_FLAGS)
)


def prep(name, extra=""):
    return f"data_prep.main --input={{d}}/{name} {PREP} {extra}"


DATA_PREP_MAIN = [
    ("no flags", "data_prep.main", "--output_dir"),
    (
        "no output_dir",
        "data_prep.main --input={d}/corpus.txt --vocab_file={vocab}",
        "pass --output_dir",
    ),
    ("no vocab_file", "data_prep.main --input={d}/corpus.txt --output_dir={o}/out", "--vocab_file"),
    ("input missing", prep("nope.txt"), "nope.txt"),
    ("input glob matches nothing", prep("nope-*.txt"), ("nope-*.txt", "matches no file")),
    ("input is a directory", prep("dir"), "dir"),
    ("input empty", prep("empty.txt"), "empty.txt"),
    ("input blank lines only", prep("blank.txt"), "blank.txt"),
    ("input UTF-16 with BOM", prep("utf16.txt"), "utf16.txt"),
    ("input UTF-16 big-endian", prep("utf16be.txt"), "utf16be.txt"),
    ("input UTF-16 without BOM", prep("utf16-nobom.txt"), "utf16-nobom.txt"),
    ("input UTF-32", prep("utf32.txt"), "utf32.txt"),
    ("input latin-1", prep("latin1.txt"), "latin1.txt"),
    ("input NUL bytes", prep("nul.txt"), "nul.txt"),
    ("input random bytes", prep("random.bin"), "random.bin"),
    ("input truncated gzip", prep("truncated.gz"), "truncated.gz"),
    ("input gzip of UTF-16", prep("utf16.gz"), "utf16.gz"),
    ("input bz2 not a dump", prep("plain.bz2"), "plain.bz2"),
    ("input JSONL line cut is counted", prep("bad.jsonl"), _counted("bad_json_lines': 1")),
    (
        "input JSONL without the field",
        prep("nofield.jsonl"),
        "20 JSON lines were not objects with a string field 'text'",
    ),
    ("input UTF-8 BOM works", prep("bom.txt"), _same_records),
    ("input CRLF works", prep("crlf.txt"), _same_records),
    ("input gzip named .txt works", prep("gzip-named.txt"), _same_records),
    ("input text named .gz works", prep("fake.gz"), _same_records),
    ("input text named .parquet works", prep("text.parquet"), _same_records),
    ("max_seq_length 0", prep("corpus.txt", "--max_seq_length=0"), "max_seq_length"),
    ("max_seq_length negative", prep("corpus.txt", "--max_seq_length=-5"), "max_seq_length"),
    ("max_seq_length a word", prep("corpus.txt", "--max_seq_length=long"), "max_seq_length"),
    ("max_predictions 0", prep("corpus.txt", "--max_predictions_per_seq=0"), "max_predictions"),
    ("masked_lm_prob NaN", prep("corpus.txt", "--masked_lm_prob=nan"), "masked_lm_prob"),
    ("masked_lm_prob above 1", prep("corpus.txt", "--masked_lm_prob=1.5"), "masked_lm_prob"),
    ("short_seq_prob negative", prep("corpus.txt", "--short_seq_prob=-0.1"), "short_seq_prob"),
    ("dupe_factor 0", prep("corpus.txt", "--dupe_factor=0"), "dupe_factor"),
    ("num_workers 0 works in process", prep("corpus.txt", "--num_workers=0"), _same_records),
    ("num_workers negative", prep("corpus.txt", "--num_workers=-1"), "num_workers"),
    ("eval_fraction 1", prep("corpus.txt", "--eval_fraction=1"), "eval_fraction"),
    ("block_size_mb 0", prep("corpus.txt", "--block_size_mb=0"), "block_size_mb"),
    ("block_size_mb inf", prep("corpus.txt", "--block_size_mb=inf"), "block_size_mb=inf"),
    ("shard_size_mb NaN", prep("corpus.txt", "--shard_size_mb=nan"), "shard_size_mb=nan"),
    ("num_shards negative", prep("corpus.txt", "--num_shards=-2"), "num_shards"),
    ("format unknown", prep("corpus.txt", "--format=parquet"), "--format"),
    ("mode unknown", prep("corpus.txt", "--mode=fast"), "--mode"),
    (
        "flag typo",
        prep("corpus.txt", "--max_seq_len=64"),
        "Unknown command line flag 'max_seq_len'",
    ),
    (
        "language not a code",
        prep("corpus.txt", "--language=en!"),
        "--language=en!: 'en!' is not a language code",
    ),
    (
        "language in reference mode",
        prep("corpus.txt", "--mode=reference --language=de"),
        "--language is for --mode=scaled or beam",
    ),
    (  # PREP asks for an eval split and two shards: reference mode writes neither
        "eval split in reference mode",
        prep("corpus.txt", "--mode=reference"),
        "--eval_fraction is for --mode=scaled or beam; reference mode writes no eval split",
    ),
    (
        "shards in reference mode",
        prep("corpus.txt", "--mode=reference --eval_fraction=0.01 --num_eval_shards=0"),
        "--num_shards is for --mode=scaled or beam; reference mode writes one shard",
    ),
    ("stray argument", prep("corpus.txt", "stray.txt"), "stray.txt"),
    (
        "vocab missing",
        prep("corpus.txt", "--vocab_file={d}/nope.txt"),
        ("nope.txt", "does not exist"),
    ),
    (
        "vocab a text file",
        prep("corpus.txt", "--vocab_file={d}/clean.txt"),
        ("clean.txt", "lacks the special tokens"),
    ),
    ("vocab empty", prep("corpus.txt", "--vocab_file={d}/vocab_empty.txt"), "vocab_empty.txt"),
    ("vocab no [MASK]", prep("corpus.txt", "--vocab_file={d}/vocab_nomask.txt"), "vocab_nomask"),
    ("vocab UTF-16", prep("corpus.txt", "--vocab_file={d}/vocab_utf16.txt"), "vocab_utf16.txt"),
    ("vocab random bytes", prep("corpus.txt", "--vocab_file={d}/vocab.bin"), "vocab.bin"),
    ("vocab a directory", prep("corpus.txt", "--vocab_file={d}/dir"), "dir"),
    ("output_dir a file", prep("corpus.txt", "--output_dir={d}/not_a_dir"), "not_a_dir"),
    (
        "output_dir under a file",
        prep("corpus.txt", "--output_dir={d}/not_a_dir/out"),
        ("not_a_dir", "cannot write to --output_dir"),
    ),
    ("tfds unknown", prep("corpus.txt", "--input=tfds:no_such_set_xyz"), "no_such_set_xyz"),
    (
        "input glob matches the vocab",
        prep("corpus.txt", "--input={d}/vocab_c*.txt --vocab_file={d}/vocab_crlf.txt"),
        ("vocab_crlf.txt", "matches the vocabulary"),
    ),
    (
        "rerun other flags",
        prep("corpus.txt", "--output_dir={d}/records --dupe_factor=3"),
        "records",
    ),
    ("verify damaged shard", "data_prep.main --verify --output_dir={d}/rec_badmd5", "{shard}"),
    ("verify missing shard", "data_prep.main --verify --output_dir={d}/rec_missing", "{shard}"),
    (
        "verify no manifest",
        "data_prep.main --verify --output_dir={d}/rec_nomanifest",
        "rec_nomanifest",
    ),
]

DEC = "data_prep.decode --input={d}/records/{shard} --vocab_file={vocab}"
DECODE = [
    ("decode: no input", "data_prep.decode --vocab_file={vocab}", "pass --input"),
    ("decode: no vocab", "data_prep.decode --input={d}/records/{shard}", "--vocab_file"),
    ("decode: input missing", DEC + " --input={d}/nope.arrayrecord", "nope.arrayrecord"),
    ("decode: text as tfrecord", DEC + " --input={d}/text.tfrecord", "text.tfrecord"),
    (
        "decode: text as arrayrecord",
        DEC + " --input={d}/text.arrayrecord",
        "text.arrayrecord: not a readable ArrayRecord file",
    ),
    ("decode: input a directory", DEC + " --input={d}/records", "records"),
    ("decode: empty record file", DEC + " --input={d}/empty.tfrecord", "empty.tfrecord"),
    ("decode: truncated shard", DEC + " --input={d}/rec_cut/{shard} --limit=0", "{shard}"),
    ("decode: vocab too small", DEC + " --vocab_file={d}/vocab_200.txt", "vocab_200.txt"),
    ("decode: vocab missing", DEC + " --vocab_file={d}/nope.txt", "nope.txt"),
    ("decode: vocab UTF-16", DEC + " --vocab_file={d}/vocab_utf16.txt", "vocab_utf16.txt"),
    ("decode: limit negative", DEC + " --limit=-1", "--limit"),
    ("decode: skip a word", DEC + " --skip=x", "skip"),
    (
        "decode: CRLF vocab works",
        DEC + " --vocab_file={d}/vocab_crlf.txt --limit=2",
        _decoded_as_with_lf_vocab,
    ),
]

VOC = "data_prep.vocab --input={d}/corpus.txt --output={o}/v.txt"
VOCAB = [
    ("vocab: no input", "data_prep.vocab --output={o}/v.txt", "--input"),
    ("vocab: no output", "data_prep.vocab --input={d}/corpus.txt", "--output"),
    ("vocab: input missing", VOC + " --input={d}/nope.txt", "nope.txt"),
    ("vocab: input empty", VOC + " --input={d}/empty.txt", ("empty.txt", "holds no text")),
    ("vocab: input blank", VOC + " --input={d}/blank.txt", ("blank.txt", "holds no text")),
    ("vocab: input UTF-16", VOC + " --input={d}/utf16.txt", "utf16.txt"),
    ("vocab: input random bytes", VOC + " --input={d}/random.bin", "random.bin"),
    ("vocab: input a directory", VOC + " --input={d}/dir", "dir"),
    ("vocab: size 0", VOC + " --vocab_size=0", "--vocab_size=0 leaves no room for text"),
    ("vocab: size negative", VOC + " --vocab_size=-3", "--vocab_size"),
    ("vocab: size absurd", VOC + " --vocab_size=3000000000", "is more than any model's vocabulary"),
    (
        "vocab: size too small",
        VOC + " --vocab_size=30",
        "--vocab_size=30 is smaller than the 100 entries this corpus needs",
    ),
    ("vocab: size a word", VOC + " --vocab_size=big", "vocab_size"),
    ("vocab: model type unknown", VOC + " --model_type=wordpeace", "--model_type"),
    ("vocab: a BPE tokenizer into a .txt", VOC + " --model_type=bpe", "--output"),
    ("vocab: output a directory", VOC + " --output={d}/dir --vocab_size=300", "dir"),
    ("vocab: output under a file", VOC + " --output={d}/not_a_dir/v.txt", "not_a_dir"),
    (
        "vocab: sp size too small",
        VOC + " --model_type=sentencepiece --vocab_size=10",
        "--vocab_size=10 is smaller than the",
    ),
    ("vocab: BOM input works", VOC + " --input={d}/bom.txt --vocab_size=300", _vocab_without_bom),
]

TRAIN = (
    "bert_jax.main --config=configs/tiny.py --workdir={o}/run --config.mesh.num_devices=1 "
    "--config.data.train_files={d}/records --config.data.eval_files={d}/records"
)
BERT_JAX_MAIN = [
    ("train: no flags", "bert_jax.main", "--config"),
    ("train: no workdir", "bert_jax.main --config=configs/tiny.py", "--workdir"),
    (
        "train: a fine-tuning config",
        "bert_jax.main --config=configs/finetune/sst2.py --workdir={o}/run",
        "it is a fine-tuning config: run python -m bert_jax.finetune",
    ),
    ("train: config missing", TRAIN + " --config=configs/nope.py", "configs/nope.py"),
    ("train: config not python", TRAIN + " --config={d}/corpus.txt", "corpus.txt"),
    (
        "train: config field typo",
        TRAIN + " --config.optim.learnin_rate=1e-3",
        "error: --config.optim.learnin_rate: no such config field; did you mean "
        "--config.optim.learning_rate?",
    ),
    (
        "train: config section typo",
        TRAIN + " --config.optm.learning_rate=1e-3",
        "error: --config.optm.learning_rate: no such",
    ),
    ("train: value a word", TRAIN + " --config.optim.learning_rate=fast", "learning_rate"),
    ("train: lr negative", TRAIN + " --config.optim.learning_rate=-1e-4", "learning_rate"),
    (  # the config is checked before the data is looked for
        "train: lr negative and data missing",
        TRAIN + " --config.optim.learning_rate=-1e-4 --config.data.train_files={d}/nope",
        "error: config: optim.learning_rate=-0.0001 must be positive",
    ),
    ("train: lr NaN", TRAIN + " --config.optim.learning_rate=nan", "learning_rate"),
    ("train: lr 0", TRAIN + " --config.optim.learning_rate=0", "learning_rate"),
    ("train: warmup past the end", TRAIN + " --config.optim.warmup_steps=500", "warmup_steps"),
    ("train: steps 0", TRAIN + " --config.train.num_train_steps=0", "num_train_steps"),
    ("train: batch 0", TRAIN + " --config.train.global_batch_size=0", "global_batch_size"),
    (
        "train: batch not divisible",
        TRAIN + " --config.mesh.num_devices=8 --config.train.global_batch_size=12",
        "global_batch_size",
    ),
    ("train: mesh product", TRAIN + " --config.mesh.num_devices=8 --config.mesh.data=3", "mesh"),
    (
        "train: tensor vs heads",
        TRAIN + " --config.mesh.num_devices=4 --config.mesh.data=1 --config.mesh.tensor=4",
        "tensor",
    ),
    ("train: too many devices", TRAIN + " --config.mesh.num_devices=64", "num_devices"),
    (
        "train: hidden vs heads",
        TRAIN + " --config.model.num_attention_heads=3",
        "num_attention_heads",
    ),
    ("train: optimizer unknown", TRAIN + " --config.optim.optimizer=sgd", "optimizer"),
    ("train: train_files unset", TRAIN + " --config.data.train_files=", "train_files"),
    (
        "train: train_files missing",
        TRAIN + " --config.data.train_files={d}/nope",
        "error: no record files match '{d}/nope'",
    ),
    (
        "train: a directory of text files",
        TRAIN + " --config.data.train_files={d}/dir",
        ("dir", "has no manifest.json"),
    ),
    (
        "train: no eval split",
        TRAIN + " --config.data.train_files={d}/rec_noeval --config.data.eval_files={d}/rec_noeval",
        ("rec_noeval", "lists no eval shards"),
    ),
    (
        "train: half-written data",
        TRAIN + " --config.data.train_files={d}/rec_nomanifest",
        "rec_nomanifest",
    ),
    (  # the glob's shards come from the manifest: the length check is reached, no .tmp read
        "train: stray .tmp by glob is not read",
        TRAIN + " --config.data.train_files={d}/rec_tmp/train-* --config.data.max_seq_length=128",
        "max_seq_length",
    ),
    ("train: missing shard", TRAIN + " --config.data.train_files={d}/rec_missing", "{shard}"),
    (
        "train: bad md5",
        TRAIN + " --config.data.train_files={d}/rec_badmd5 --config.data.verify_md5=true",
        "{shard}",
    ),
    ("train: length vs manifest", TRAIN + " --config.data.max_seq_length=128", "max_seq_length"),
    (
        "train: data vocab > model",
        TRAIN + " --config.data.train_files={d}/rec_morevocab",
        "vocab_size",
    ),
    (
        "train: text as records",
        TRAIN + " --config.data.train_files={d}/corpus.txt --config.data.max_seq_length=64"
        " --config.data.max_predictions_per_seq=10",
        ("corpus.txt", "is it a TFRecord file?"),
    ),
    ("train: a file as workdir", TRAIN + " --workdir={d}/not_a_dir", "not_a_dir"),
    ("train: stray argument", TRAIN + " extra", "extra"),
]

EXPORT = "bert_jax.export --workdir={d}/run --output_dir={o}/hf"
BERT_JAX_EXPORT = [
    ("export: no flags", "bert_jax.export", "--workdir"),
    ("export: no output_dir", "bert_jax.export --workdir={d}/run", "--output_dir"),
    ("export: workdir missing", EXPORT + " --workdir={d}/nope", ("nope", "holds no checkpoints")),
    ("export: workdir without checkpoints", EXPORT + " --workdir={d}/dir", "dir"),
    ("export: workdir a file", EXPORT + " --workdir={d}/not_a_dir", "not_a_dir"),
    (
        "export: output a file",
        EXPORT + " --output_dir={d}/not_a_dir",
        ("not_a_dir", "is a file; pass a directory"),
    ),
    ("export: output under a file", EXPORT + " --output_dir={d}/not_a_dir/hf", "not_a_dir"),
    ("export: no such step", EXPORT + " --step=99", "99"),
    ("export: step negative", EXPORT + " --step=-1", "-1"),
    ("export: step a word", EXPORT + " --step=last", "step"),
    ("export: vocab of 200", EXPORT + " --vocab_file={d}/vocab_200.txt", "vocab_200.txt"),
    ("export: vocab missing", EXPORT + " --vocab_file={d}/nope.txt", "nope.txt"),
    ("export: damaged checkpoint", EXPORT + " --workdir={d}/run_damaged", "checkpoints/4"),
    ("export: works", EXPORT, _exported),
]

EMBED = "bert_jax.embed --model={d}/hf --input={d}/clean.txt --output={o}/e.npz"
BERT_JAX_EMBED = [
    ("embed: no flags", "bert_jax.embed", "--model"),
    ("embed: no output", "bert_jax.embed --model={d}/hf --input={d}/clean.txt", "--output"),
    ("embed: no input", "bert_jax.embed --model={d}/hf --output={o}/e.npz", "--input is required"),
    ("embed: model missing", EMBED + " --model={d}/nope", "nope"),
    ("embed: model not a model", EMBED + " --model={d}/dir", ("dir", "has no config.json")),
    ("embed: model a file", EMBED + " --model={d}/corpus.txt", "corpus.txt"),
    ("embed: input missing", EMBED + " --input={d}/nope.txt", "nope.txt"),
    ("embed: input latin-1", EMBED + " --input={d}/latin1.txt", "latin1.txt' is not UTF-8 text"),
    ("embed: input UTF-16", EMBED + " --input={d}/utf16.txt", "utf16.txt"),
    ("embed: input random bytes", EMBED + " --input={d}/random.bin", "random.bin"),
    ("embed: input a directory", EMBED + " --input={d}/dir", "dir"),
    ("embed: input empty", EMBED + " --input={d}/empty.txt", "empty.txt"),
    ("embed: length 1", EMBED + " --max_seq_length=1", "--max_seq_length"),
    ("embed: length past positions", EMBED + " --max_seq_length=4096", "max_seq_length"),
    ("embed: batch 0", EMBED + " --batch_size=0", "--batch_size"),
    ("embed: dtype unknown", EMBED + " --dtype=float16", "--dtype"),
    ("embed: output a directory", EMBED + " --output={d}/dir", "dir"),
    ("embed: output under a file", EMBED + " --output={d}/not_a_dir/e.npz", "not_a_dir"),
    (
        "embed: workdir without vocab",
        EMBED + " --model={d}/run --vocab_file={d}/vocab_200.txt",
        "vocab_200.txt",
    ),
    ("embed: damaged checkpoint", EMBED + " --model={d}/run_damaged", "checkpoints/4"),
    (
        "embed: BOM and CRLF input works",
        EMBED + " --input={d}/crlf_bom.txt --max_seq_length=16",
        _same_embeddings,
    ),
]


def ft(extra="", task="sst2", train="ft/sst_good.tsv"):
    return (
        f"bert_jax.finetune --config=configs/finetune/{task}.py --init={{d}}/hf "
        f"--workdir={{o}}/ft --config.data.train_file={{d}}/{train} --config.mesh.num_devices=1 "
        f"--config.data.max_seq_length=16 {extra}"
    )


FT = ft()
FINETUNE = [
    ("finetune: no flags", "bert_jax.finetune", "--workdir"),
    ("finetune: no config", "bert_jax.finetune --workdir={o}/ft --init={d}/hf", "--config"),
    ("finetune: no init", FT + " --init=", "--init"),
    ("finetune: init missing", FT + " --init={d}/nope", "nope"),
    ("finetune: init not a model", FT + " --init={d}/dir", "dir"),
    ("finetune: init damaged run", FT + " --init={d}/run_damaged", "checkpoints/4"),
    ("finetune: train file missing", FT + " --config.data.train_file={d}/ft/nope.tsv", "nope.tsv"),
    ("finetune: TSV empty", FT + " --config.data.train_file={d}/ft/sst_empty.tsv", "sst_empty.tsv"),
    (
        "finetune: TSV header only",
        FT + " --config.data.train_file={d}/ft/sst_header.tsv",
        "sst_header.tsv",
    ),
    (
        "finetune: TSV ragged",
        FT + " --config.data.train_file={d}/ft/sst_ragged.tsv",
        "sst_ragged.tsv",
    ),
    (
        "finetune: TSV unknown label",
        FT + " --config.data.train_file={d}/ft/sst_labels.tsv",
        "sst_labels.tsv",
    ),
    (
        "finetune: TSV label spaces",
        FT + " --config.data.train_file={d}/ft/sst_spaces.tsv",
        "sst_spaces.tsv",
    ),
    (
        "finetune: TSV no header",
        FT + " --config.data.train_file={d}/ft/sst_noheader.tsv",
        "sst_noheader.tsv",
    ),
    ("finetune: TSV UTF-16", FT + " --config.data.train_file={d}/utf16.txt", "utf16.txt"),
    (
        "finetune: eval file missing",
        FT + " --config.data.eval_files={d}/ft/nope_dev.tsv",
        "nope_dev.tsv",
    ),
    (
        "finetune: SQuAD not SQuAD",
        ft("--config.data.max_query_length=8", task="squad", train="ft/squad_not.json"),
        "squad_not.json",
    ),
    (
        "finetune: SQuAD cut JSON",
        ft("--config.data.max_query_length=8", task="squad", train="ft/squad_broken.json"),
        "squad_broken.json",
    ),
    (
        "finetune: CoNLL bad line",
        ft(task="conll", train="ft/bad.conll"),
        "bad.conll",
    ),
    ("finetune: layout unknown", FT + " --config.data.layout=sst3", "layout"),
    ("finetune: format unknown", FT + " --config.data.format=csv", "format"),
    ("finetune: lr negative", FT + " --config.optim.learning_rate=-2e-5", "learning_rate"),
    ("finetune: field typo", FT + " --config.data.max_seq_len=16", "max_seq_length"),
    ("finetune: length 2", FT + " --config.data.max_seq_length=2", "max_seq_length"),
    (
        "finetune: length past positions",
        FT + " --config.data.max_seq_length=4096",
        "max_seq_length",
    ),
    ("finetune: batch 0", FT + " --config.train.batch_size=0", "batch_size"),
    ("finetune: epochs negative", FT + " --config.train.num_epochs=-1", "num_epochs"),
    ("finetune: lora rank negative", FT + " --config.lora.rank=-4", "lora.rank"),
    (
        "finetune: vocab too small",
        FT + " --config.data.vocab_file={d}/vocab_200.txt",
        "vocab_200.txt",
    ),
    ("finetune: mode unknown", FT + " --mode=eval", "--mode"),
    (
        "finetune: predict without test",
        "bert_jax.finetune --mode=predict --workdir={o}/ft",
        "--test_file",
    ),
    (
        "finetune: predict no run",
        "bert_jax.finetune --mode=predict --workdir={d}/dir --test_file={d}/ft/sst_good.tsv",
        "dir",
    ),
    # --output is checked before the model loads and predicts, not by a traceback at the write
    (
        "finetune: predict output a directory",
        "bert_jax.finetune --mode=predict --workdir={d}/dir --test_file={d}/ft/sst_good.tsv "
        "--output={d}/dir",
        "--output='{d}/dir' is a directory",
    ),
    (
        "finetune: predict eval batch negative",
        "bert_jax.finetune --mode=predict --workdir={d}/dir --test_file={d}/ft/sst_good.tsv "
        "--eval_batch_size=-8",
        "--eval_batch_size=-8",
    ),
    (
        "finetune: predict eval batch 0",
        "bert_jax.finetune --mode=predict --workdir={d}/dir --test_file={d}/ft/sst_good.tsv "
        "--eval_batch_size=0",
        "--eval_batch_size=0",
    ),
    (
        "finetune: predict output under a file",
        "bert_jax.finetune --mode=predict --workdir={d}/dir --test_file={d}/ft/sst_good.tsv "
        "--output={d}/not_a_dir/p.tsv",
        "not_a_dir",
    ),
]

# Interrupts (Ctrl-C once and twice, killed workers), concurrent runs on one directory and
# mount-point cases (full disks, an export directory that is a mount): issue 23's run faults,
# each a command line and a scenario that runs it (tests/support/sweep_runs.py).
RUNS = sweep_runs.CASES

ALL_CASES = [
    *DATA_PREP_MAIN,
    *DECODE,
    *VOCAB,
    *BERT_JAX_MAIN,
    *BERT_JAX_EXPORT,
    *BERT_JAX_EMBED,
    *FINETUNE,
    *sweep_integrity.CASES,  # issue 23: damaged records, manifests, features
    *sweep_inputs.CASES,  # issue 23: model files, dumps, pipes, seeds, outputs, resumes
    *sweep_plan.CASES,  # issue 34: the planner's flags
    *RUNS,
    *sweep_signals.CASES,  # issue 34: signals, config fields, a UTF-16 dump's language, ...
    *sweep_buckets.CASES,  # issue 34: bucket paths and outages, workdir locks
    *sweep_checkpoints.CASES,  # issue 34: Orbax's errors in the storage layer's words
]
CASES = {case[0]: case for case in ALL_CASES}
assert len(CASES) == len(ALL_CASES), "a case id twice"


def _command(world, case: str, o) -> tuple[str, list[str]]:
    module, *args = CASES[case][1].split()
    return module, [a.format(o=o, **world) for a in args]


def test_a_forked_child_answers_as_python_dash_m(world, server, tmp_path):
    """The fork server runs the real code path: status, stdout and stderr are those of a fresh
    `python -m` process for a flag error and a data error."""
    for case in ("train: config field typo", "input UTF-16 with BOM"):
        module, args = _command(world, case, tmp_path)
        proc = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert (proc.returncode, proc.stdout, proc.stderr) == server.run(module, args), case


def _param(case):
    """Run faults that start real processes (signals, mounts) are slow; mounts need user
    namespaces."""
    expected = CASES[case][2]
    marks = []
    if isinstance(expected, sweep_runs.Run):
        marks += [pytest.mark.slow] if expected.real else []
        if expected.mount and not sweep_runs.can_mount():
            marks.append(pytest.mark.skip(reason="no user/mount namespaces here"))
    return pytest.param(case, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_bad_input(world, server, tmp_path, case):
    module, args = _command(world, case, tmp_path)
    expected = CASES[case][2]
    if isinstance(expected, sweep_runs.Run):  # a scenario: runs the command itself
        expected(world | {"server": server}, str(tmp_path), module, args)
        return
    status, out, err = server.run(module, args)
    if callable(expected):  # an input that must work
        assert status == 0, err[-3000:]
        expected({**world, "server": server}, str(tmp_path), out)
        return
    assert "Traceback" not in err, err[-3000:]
    if isinstance(expected, sweep_integrity.AfterStart):  # found while training: after its start
        started = out.splitlines()
        assert all(line.startswith(expected.START) for line in started), out[-2000:]
        out = ""
    assert (status, out) == (2, ""), (status, out[-2000:], err[-2000:])
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err[-3000:]
    for text in (expected,) if isinstance(expected, str) else expected:
        names = text.format(**world)
        assert names in err, f"the error does not name {names!r}: {err}"
    if module == "data_prep.vocab":  # no useless vocabulary left behind
        assert not os.path.exists(os.path.join(tmp_path, "v.txt"))


def test_the_sweep_covers_every_binary_with_at_least_300_cases():
    modules = {line.split()[0] for _, line, _ in CASES.values()}
    assert len(CASES) >= 300
    assert modules == {
        "data_prep.main",
        "data_prep.decode",
        "data_prep.vocab",
        "bert_jax.main",
        "bert_jax.export",
        "bert_jax.embed",
        "bert_jax.finetune",
        "bert_jax.plan",
    }
    # issue 23's run faults: every class, for the binaries that take a workdir or output
    kinds = {(line.split()[0], run.kind) for _, line, run in RUNS}
    assert {kind for _, kind in kinds} == {"interrupt", "concurrency", "mount"}
    assert {module for module, _ in kinds} == {
        "data_prep.main",
        "bert_jax.main",
        "bert_jax.export",
        "bert_jax.finetune",
    }
