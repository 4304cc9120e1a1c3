"""data_prep.main's flags, run as the binary (the fork server: a fork per case)."""

import os

import pytest

from support.golden import TESTDATA


@pytest.mark.parametrize("flag", ["max_seq_length", "max_predictions_per_seq"])
@pytest.mark.parametrize("mode", ["scaled", "reference"])
@pytest.mark.parametrize("value", [2**31, 2**63, 10**30])
def test_a_length_past_int32_is_one_error_line_before_any_work(
    tmp_path, forkserver, flag, mode, value
):
    """2**63 was an IndexError (max_seq_length) or OverflowError (max_predictions_per_seq)
    traceback from numpy, after the job's work directory was made."""
    out = tmp_path / "out"
    args = [
        f"--input={TESTDATA / 'sample_text.txt'}",
        f"--vocab_file={TESTDATA / 'bert-base-uncased-vocab.txt'}",
        f"--output_dir={out}",
        f"--mode={mode}",
        "--dupe_factor=1",
        f"--{flag}={value}",
    ]
    status, stdout, stderr = forkserver.run("data_prep.main", args)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [
        f"error: flag --{flag}={value}: {value} is not integer <= 2147483647"
    ]
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "flag, low", [("dupe_factor", 1), ("num_shards", 0), ("num_eval_shards", 0)]
)
def test_a_count_past_int32_is_one_error_line_naming_the_range(tmp_path, forkserver, flag, low):
    """--dupe_factor=2**63 looped on with no end; --num_shards=2**63 was refused only after the
    whole input was read."""
    out = tmp_path / "out"
    args = [
        f"--input={TESTDATA / 'sample_text.txt'}",
        f"--vocab_file={TESTDATA / 'bert-base-uncased-vocab.txt'}",
        f"--output_dir={out}",
        f"--{flag}={2**63}",
    ]
    status, stdout, stderr = forkserver.run("data_prep.main", args, timeout=30)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [
        f"error: flag --{flag}={2**63}: {2**63} is not an integer in the range [{low}, 2147483647]"
    ]
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "flags, line",
    [
        (
            ["--eval_fraction=0", "--num_eval_shards=3"],
            "--num_eval_shards=3 is for the eval split, and --eval_fraction=0 holds out none",
        ),
        (
            ["--eval_fraction=0", "--eval_masked_lm_prob=0.3"],
            "--eval_masked_lm_prob=0.3 is for the eval split, and --eval_fraction=0 holds out",
        ),
        (["--tfds_data_dir=/tmp/tfds"], "--tfds_data_dir='/tmp/tfds' is for TFDS inputs"),
    ],
)
def test_a_flag_that_another_turns_off_is_refused(tmp_path, forkserver, flags, line):
    """Each did nothing, silently: no eval split to shard or mask, no TFDS input to read."""
    out = tmp_path / "out"
    args = [
        f"--input={TESTDATA / 'sample_text.txt'}",
        f"--vocab_file={TESTDATA / 'bert-base-uncased-vocab.txt'}",
        f"--output_dir={out}",
        *flags,
    ]
    status, stdout, stderr = forkserver.run("data_prep.main", args)
    assert (status, stdout) == (2, ""), stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith(f"error: {line}"), stderr
    assert not os.path.exists(out)
