"""`python -m bert_jax.finetune` end to end, from a tiny BERT saved by transformers itself.

SQuAD v2.0: train (predicting the test file at the end), then --mode=predict on the same file
gives the same answers. SST-2: the exported model, loaded by transformers with its own tokenizer,
predicts what our prediction file says.
"""

import csv
import glob
import json
import os

import numpy as np
import pytest

from support.finetune_data import TINY, VOCAB, squad_file, sst2_file

pytestmark = pytest.mark.slow  # each command starts JAX and compiles in a fresh process


@pytest.fixture(scope="module")
def transformers_bert(tmp_path_factory):
    """A tiny BertForPreTraining saved with save_pretrained, plus its vocab.txt (nothing
    downloaded)."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("transformers_bert")
    import torch

    torch.manual_seed(0)  # the same random BERT every run: how fast it learns depends on it
    config = transformers.BertConfig(vocab_size=len(VOCAB), **TINY)
    transformers.BertForPreTraining(config).save_pretrained(str(path))
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(path)


@pytest.fixture
def finetune(forkserver):
    """finetune(*args) -> stdout of `python -m bert_jax.finetune *args`, which must succeed (a
    real process, forked by the suite's fork server: support/forkrun.py)."""

    def run(*args):
        status, out, err = forkserver.run("bert_jax.finetune", list(args), timeout=900)
        assert status == 0, f"{' '.join(args)}\n{out[-3000:]}\n{err[-5000:]}"
        return out

    return run


COMMON = [
    "--config.mesh.num_devices=2",
    "--config.model.hidden_dropout_prob=0",
    "--config.model.attention_probs_dropout_prob=0",
    "--config.optim.learning_rate=1e-3",
    "--config.train.batch_size=16",
    "--config.eval.batch_size=32",
    "--config.data.max_seq_length=32",
]


def test_squad_v2_train_then_predict(transformers_bert, tmp_path, finetune):
    train_file = squad_file(tmp_path / "train.json", 256, 0, v2=True)
    test_file = squad_file(tmp_path / "test.json", 32, 1, v2=True)
    workdir = str(tmp_path / "work")
    out = finetune(
        "--config=configs/finetune/squad_v2.py",
        f"--init={transformers_bert}",
        f"--workdir={workdir}",
        f"--config.data.train_file={train_file}",
        f"--config.data.eval_files={test_file}",
        f"--config.data.test_file={test_file}",
        "--config.data.doc_stride=8",
        "--config.data.max_query_length=8",
        "--config.train.num_epochs=5",
        "--config.export=False",
        *COMMON,
    )
    assert "finished at step" in out
    with open(os.path.join(workdir, "predictions", "test.json")) as f:
        at_end = json.load(f)
    with open(os.path.join(workdir, "predictions", "test_null_odds.json")) as f:
        assert set(json.load(f)) == set(at_end)
    gold = {
        qa["id"]: qa["answers"][0]["text"] if qa["answers"] else ""
        for p in json.load(open(test_file))["data"][0]["paragraphs"]
        for qa in p["qas"]
    }
    assert len(at_end) == 32 and sum(at_end[q] == gold[q] for q in gold) >= 24

    out = finetune(
        "--mode=predict",
        f"--workdir={workdir}",
        f"--test_file={test_file}",
        f"--output={tmp_path / 'again.json'}",
    )
    assert "wrote" in out and "'exact'" in out  # the test file has answers, so it is scored too
    with open(tmp_path / "again.json") as f:
        assert json.load(f) == at_end

    # A workdir saved before train.packing existed (2026-11-25) predicts with today's default.
    (saved,) = [
        f
        for f in glob.glob(os.path.join(workdir, "checkpoints", "*", "config", "*"))
        if '"packing"' in open(f).read()
    ]
    with open(saved) as f:
        old = json.load(f)
    del old["train"]["packing"]
    with open(saved, "w") as f:
        json.dump(old, f)
    finetune(
        "--mode=predict",
        f"--workdir={workdir}",
        f"--test_file={test_file}",
        f"--output={tmp_path / 'old.json'}",
    )
    with open(tmp_path / "old.json") as f:
        assert json.load(f) == at_end


def test_sst2_prediction_file_and_export_agree_with_transformers(
    transformers_bert, tmp_path, finetune
):
    import torch
    import transformers

    test_rows = ["index\tsentence"] + [
        f"{i}\t{line.split(chr(9))[0]}"
        for i, line in enumerate(
            open(sst2_file(tmp_path / "dev.tsv", 32, 1)).read().splitlines()[1:]
        )
    ]
    (tmp_path / "test.tsv").write_text("\n".join(test_rows) + "\n")
    workdir = str(tmp_path / "work")
    finetune(
        "--config=configs/finetune/sst2.py",
        f"--init={transformers_bert}",
        f"--workdir={workdir}",
        f"--config.data.train_file={sst2_file(tmp_path / 'train.tsv', 256, 0)}",
        f"--config.data.test_file={tmp_path / 'test.tsv'}",
        "--config.train.num_epochs=5",
        *COMMON,
    )
    with open(os.path.join(workdir, "predictions", "test.tsv")) as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [
        str(i) for i in range(32)
    ]
    ours = [r[1] for r in rows[1:]]

    export = os.path.join(workdir, "export")
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(export).eval()
    sentences = [line.split("\t")[1] for line in test_rows[1:]]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.numpy()
    theirs = [model.config.id2label[int(i)] for i in np.argmax(logits, axis=-1)]
    assert theirs == ours
    # And the fine-tuned model is right: the keyword decides the label.
    expected = [
        "1" if any(w in s.split() for w in ("good", "great", "fine")) else "0" for s in sentences
    ]
    assert np.mean([a == b for a, b in zip(ours, expected)]) > 0.85


def test_two_processes_fine_tune_like_one(transformers_bert, tmp_path, forkserver, finetune):
    """--distributed on localhost, as pre-training's (runtime.start: gloo, the coordinator
    flags): 2 processes x 1 CPU device fine-tune as 1 process x 2 devices, to the same loss and
    eval figures."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    args = [
        "--config=configs/finetune/sst2.py",
        f"--init={transformers_bert}",
        f"--config.data.train_file={sst2_file(tmp_path / 'train.tsv', 64, 0)}",
        f"--config.data.eval_files={sst2_file(tmp_path / 'dev.tsv', 32, 1)}",
        "--config.train.num_epochs=2",
        "--config.train.log_every_steps=1",
        "--config.train.packing=false",  # rows packed per process would differ from one's
        "--config.export=False",
        *COMMON,
    ]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    procs = [
        forkserver.start(
            "bert_jax.finetune",
            [
                "--distributed",
                f"--coordinator_address=localhost:{port}",
                "--num_processes=2",
                f"--process_id={i}",
                f"--workdir={tmp_path / 'two'}",
                *args,
                "--config.mesh.num_devices=0",  # all: one device in each process
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    assert "finished at step 8" in outs[0] and "finished at step" not in outs[1]
    finetune(f"--workdir={tmp_path / 'one'}", *args)

    def figures(workdir):
        lines = (tmp_path / workdir / "metrics.jsonl").read_text().splitlines()
        return [
            {k: v for k, v in json.loads(line).items() if "time" not in k and "per_sec" not in k}
            for line in lines
        ]

    two, one = figures("two"), figures("one")
    assert [r.pop("split") for r in two] == [r.pop("split") for r in one]
    for a, b in zip(two, one, strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
