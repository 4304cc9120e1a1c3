"""data_prep.decode's flags, run as the binary (the fork server: a fork per case)."""

import pytest

SHARD = "data_prep/testdata/sample_text.L128.P20.dupe5.tfrecord"  # 60 records


@pytest.mark.parametrize(
    "limit, skip, printed",
    [
        (2, 0, 2),
        (0, 58, 2),  # 0: all the rest
        (2**63, 0, 60),  # past sys.maxsize (absl's integers have no bound): all of them
        (2**64 + 1, 59, 1),
    ],
)
def test_a_limit_as_large_as_the_user_likes_prints_the_records_there_are(
    forkserver, vocab_file, limit, skip, printed
):
    args = [f"--input={SHARD}", f"--vocab_file={vocab_file}", f"--limit={limit}", f"--skip={skip}"]
    rc, out, err = forkserver.run("data_prep.decode", args)
    assert (rc, err) == (0, ""), err
    assert out.count("--- record") == printed


@pytest.mark.parametrize("skip", [60, 2**63, 10**30])
def test_a_skip_past_the_end_is_one_error_line(forkserver, vocab_file, skip):
    args = [f"--input={SHARD}", f"--vocab_file={vocab_file}", f"--skip={skip}"]
    rc, out, err = forkserver.run("data_prep.decode", args)
    assert rc == 2 and out == ""
    assert err.splitlines() == [
        f"error: --input={SHARD} holds no records after the first --skip={skip}"
    ]
