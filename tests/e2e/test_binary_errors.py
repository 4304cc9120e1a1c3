"""User mistakes on the bert_jax binaries: each is one `error:` line naming the file or flag, exit
status 2, nothing on stdout, no traceback (bert_jax.cli). The cases are the kinds issue 12 found
as tracebacks (bad paths, damaged or foreign files) for the binaries of this package; each case
is a process start, so the list keeps to those that fail before a model compiles."""

import json
import pathlib
import subprocess
import sys

import pytest

from support.golden import REPO


@pytest.fixture(scope="module")
def files(tmp_path_factory, testdata):
    d = tmp_path_factory.mktemp("hostile")
    (d / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (d / "texts.txt").write_text("hello world\n")
    (d / "not_a_dir").write_text("a file\n")
    (d / "no_manifest").mkdir()
    (d / "no_manifest" / "part-0.txt").write_text("text, not records\n")
    garbled = d / "garbled"
    garbled.mkdir()
    (garbled / "manifest.json").write_text('{"mode": "scaled", "shards": ')
    no_eval = d / "no_eval"
    no_eval.mkdir()
    (no_eval / "train-00000-of-00001.tfrecord").write_bytes(
        (testdata / "sample_text.L128.P20.dupe5.tfrecord").read_bytes()
    )
    (no_eval / "manifest.json").write_text(
        json.dumps(
            {
                "masked": True,
                "flags": {"max_seq_length": 128, "max_predictions_per_seq": 20},
                "vocab_md5": "0" * 32,
                "shards": {
                    "train": [
                        {"file": "train-00000-of-00001.tfrecord", "instances": 60, "md5": "x"}
                    ]
                },
            }
        )
    )
    return d


def cases(d) -> dict[str, tuple[list[str], str]]:
    """case -> (arguments, what the error line says)."""
    main = ["bert_jax.main", "--config=configs/tiny.py", f"--workdir={d / 'run'}"]
    return {
        "config file missing": (
            ["bert_jax.main", "--config=configs/nope.py", f"--workdir={d / 'run'}"],
            "configs/nope.py",
        ),
        "directory without a manifest": (
            [*main, f"--config.data.train_files={d / 'no_manifest'}"],
            "has no manifest.json",
        ),
        "garbled manifest": (
            [*main, f"--config.data.train_files={d / 'garbled'}"],
            "garbled/manifest.json cannot be read",
        ),
        "no eval split": (
            [
                *main,
                f"--config.data.train_files={d / 'no_eval'}",
                f"--config.data.eval_files={d / 'no_eval'}",
            ],
            "lists no eval shards",
        ),
        "a text file as records": (
            [
                *main,
                f"--config.data.train_files={d / 'texts.txt'}",
                "--config.data.max_seq_length=128",
                "--config.data.max_predictions_per_seq=20",
            ],
            "is it a TFRecord file?",
        ),
        "export: no run there": (
            ["bert_jax.export", f"--workdir={d / 'nothing'}", f"--output_dir={d / 'out'}"],
            "holds no checkpoints",
        ),
        "export: output is a file": (
            ["bert_jax.export", f"--workdir={d / 'nothing'}", f"--output_dir={d / 'not_a_dir'}"],
            "is a file; pass a directory",
        ),
        "embed: input not UTF-8": (
            [
                "bert_jax.embed",
                f"--model={d}",
                f"--input={d / 'latin1.txt'}",
                f"--output={d / 'o'}",
            ],
            "latin1.txt' is not UTF-8 text",
        ),
        "embed: model not a model": (
            ["bert_jax.embed", f"--model={d}", f"--input={d / 'texts.txt'}", f"--output={d / 'o'}"],
            "has no config.json",
        ),
        "embed: missing flag": (["bert_jax.embed", f"--model={d}"], "--input is required"),
    }


CASES = list(cases(pathlib.Path("DIR")))  # the names; the paths come from the fixture


@pytest.mark.parametrize("case", CASES)
def test_one_error_line(files, case):
    args, says = cases(files)[case]
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and proc.stdout == "", (case, proc.stdout, proc.stderr[-2000:])
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
