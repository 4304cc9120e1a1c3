"""python -m bert_jax.finetune's flags, run as the binary (the fork server: a fork per case)."""

import os

import pytest

TRAIN = ["--config=configs/finetune/sst2.py", "--init=hf", "--config.data.train_file=t.tsv"]


@pytest.mark.parametrize(
    "flag, hint",
    [
        ("--test_file=test.tsv", "set --config.data.test_file"),
        ("--output=p.tsv", "predictions go to <workdir>/predictions/"),
        ("--eval_batch_size=8", "set --config.eval.batch_size"),
    ],
)
def test_a_predict_mode_flag_in_train_mode_is_refused(tmp_path, forkserver, flag, hint):
    """--test_file, --output and --eval_batch_size are read in predict mode only: in train mode
    they were silently ignored (no predictions for the --test_file the user gave)."""
    workdir = tmp_path / "run"
    args = [*TRAIN, f"--workdir={workdir}", flag]
    status, stdout, stderr = forkserver.run("bert_jax.finetune", args)
    assert (status, stdout) == (2, ""), stderr
    name = flag.split("=")[0]
    assert stderr.splitlines() == [
        f"error: {name} is for --mode=predict and does nothing in train mode; {hint}"
    ]
    assert not os.path.exists(workdir)


def test_a_config_in_predict_mode_is_refused(tmp_path, forkserver):
    """Predict mode uses the config saved in --workdir: --config and its overrides did nothing."""
    args = [
        "--mode=predict",
        f"--workdir={tmp_path}",
        "--test_file=test.tsv",
        "--config=configs/finetune/sst2.py",
        "--config.eval.batch_size=4",
    ]
    status, stdout, stderr = forkserver.run("bert_jax.finetune", args)
    assert (status, stdout) == (2, ""), stderr
    assert len(stderr.splitlines()) == 1
    assert stderr.startswith("error: --config is for --mode=train: predict mode uses the config")


@pytest.mark.parametrize(
    "flag, line",
    [
        ("--eval_batch_size=9223372036854775808", "must be 1 or more (and below 2**31)"),
        ("--eval_batch_size=0", "must be 1 or more"),
        ("--output={tmp}/new/", "names no file; pass the predictions file's name"),
        ("--output={tmp}/new/..", "names no file"),
    ],
)
def test_predict_flags_are_checked_before_the_model_loads(tmp_path, forkserver, flag, line):
    """--eval_batch_size=2**63 was an IndexError traceback and --output=DIR/ (a directory to be)
    a FileNotFoundError one, both after the model had loaded and predicted."""
    flag = flag.format(tmp=tmp_path)
    args = ["--mode=predict", f"--workdir={tmp_path}", "--test_file=test.tsv", flag]
    status, stdout, stderr = forkserver.run("bert_jax.finetune", args)
    assert (status, stdout) == (2, ""), stderr
    assert len(stderr.splitlines()) == 1 and line in stderr, stderr
    assert stderr.startswith(f"error: {flag.split('=')[0]}"), stderr
