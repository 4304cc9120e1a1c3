"""metrics.jsonl across a kill: a half-written last line is dropped on resume, never fatal; a
full disk names the log."""

import errno

import pytest

from bert_jax import cli
from bert_jax.training import metrics_log


def test_resume_after_a_kill_mid_write_drops_the_half_line(tmp_path):
    log = metrics_log.MetricsLog(str(tmp_path))
    for step in (2, 4, 6):
        log.write(step, "train", {"loss": 1.0 / step})
    log.close()
    with open(tmp_path / metrics_log.JSONL_NAME, "a") as f:
        f.write('{"step": 8, "split": "tr')  # the process died here

    resumed = metrics_log.MetricsLog(str(tmp_path), resume_step=4)  # the checkpoint was at step 4
    resumed.write(6, "train", {"loss": 0.5})
    resumed.close()
    records = metrics_log.read_jsonl(str(tmp_path))
    assert [(r["step"], r["loss"]) for r in records] == [(2, 0.5), (4, 0.25), (6, 0.5)]


def test_a_damaged_line_before_the_end_is_an_error_naming_it(tmp_path):
    (tmp_path / metrics_log.JSONL_NAME).write_text(
        '{"step": 2, "split": "train"}\nnot json\n{"step": 4}\n'
    )
    with pytest.raises(ValueError, match="line 2"):
        metrics_log.read_jsonl(str(tmp_path))


def test_tensorboard_logging_does_not_import_torch_or_cloud_clients(tmp_path):
    """tensorboardX imports PyTorch where it is installed (2-3 s of every trainer's start, for
    torch tensors we never log) and boto3 and google-cloud-storage (0.5 s, for event files it
    would write to buckets itself): the log must write its events without them, and a process
    that imports them afterwards must get working modules."""
    import subprocess
    import sys

    from support.golden import REPO

    script = """
import sys
from bert_jax.training import metrics_log
log = metrics_log.MetricsLog(sys.argv[1])
log.write(1, "train", {"loss": 2.5})
log.close()
for name in ("torch", "boto3", "google.cloud.storage"):
    assert name not in sys.modules, f"tensorboardX imported {name}"
import torch  # still importable afterwards: nothing of the hiding is left behind
assert torch.zeros(1).shape == (1,)
import boto3
from google.cloud import storage
assert callable(boto3.client) and callable(storage.Client)
"""
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert [r["loss"] for r in metrics_log.read_jsonl(str(tmp_path))] == [2.5]
    assert len(list((tmp_path / metrics_log.TENSORBOARD_DIR).iterdir())) == 1


def test_a_full_disk_while_logging_names_the_log(tmp_path):
    # /dev/full fails every write with ENOSPC, as a full disk does, and the error names no file.
    log = metrics_log.MetricsLog(str(tmp_path))
    log._file = open("/dev/full", "a")
    with pytest.raises(OSError) as raised:
        log.write(1, "train", {"loss": 1.0})
    assert raised.value.errno == errno.ENOSPC
    assert cli.message(raised.value).startswith(
        f"no space left on the device writing {tmp_path / 'metrics.jsonl'}"
    )
