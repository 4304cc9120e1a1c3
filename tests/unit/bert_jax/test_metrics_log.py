"""metrics.jsonl across a kill: a half-written last line is dropped on resume, never fatal."""

import pytest

from bert_jax import metrics_log


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
