"""bench/recipe_bench.py --quick end to end: the excerpt's records prepared, both recipes trained
in turn and scored on the one held-out set; the printed curves have both sides' points, and every
accuracy is a real fraction of the [MASK] positions."""

import math
import re

import pytest
from absl import flags

from bench import recipe_bench


@pytest.fixture
def bench_flags(tmp_path):
    # Set, not parsed: parsing validates every flag in the process's registry, and a binary an
    # earlier test imported in this worker may have a required one (--config).
    flags.FLAGS.unparse_flags()
    flags.FLAGS["quick"].value = True
    flags.FLAGS["out_dir"].value = str(tmp_path)
    flags.FLAGS.mark_as_parsed()
    yield
    flags.FLAGS.unparse_flags()


ROW = re.compile(r"^(bert|modern)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)$")


def test_quick_run_prints_both_curves_of_mask_accuracies(bench_flags, capsys):
    recipe_bench.main([])
    out = capsys.readouterr().out
    lines = out.splitlines()
    (header,) = [i for i, line in enumerate(lines) if line.split()[:2] == ["side", "step"]]
    assert lines[header].split() == ["side", "step", "time_s", "cpu_s", "mask_acc", "mask_loss"]
    points = {"bert": [], "modern": []}
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        side, step, seconds, cpu, acc, loss = ROW.match(line).groups()
        points[side].append((int(step), float(seconds), float(cpu), float(acc), float(loss)))
    for side, curve in points.items():
        steps = [p[0] for p in curve]
        assert steps[0] == 0 and steps == sorted(steps) and len(steps) >= 3, (side, steps)
        times = [p[1] for p in curve]
        assert times == sorted(times) and times[-1] > 0
        for _, _, _, acc, loss in curve:
            assert 0.0 <= acc <= 1.0 and math.isfinite(loss) and loss > 0
    # The untrained models: well under 1% of the held-out [MASK] positions right (a figure over
    # all positions or the kept ones would not start there), and the loss near log(vocabulary).
    for side in points:
        assert points[side][0][3] < 0.01
        assert abs(points[side][0][4] - math.log(8000)) < 1.0
    assert points["bert"][-1][0] == 6  # the quick budget: 6 BERT steps
    (final,) = re.findall(r"BERT recipe final: \[MASK\] accuracy (\S+), loss (\S+)", out)
    assert float(final[0]) == points["bert"][-1][3]
    assert re.search(r"modern recipe (reached|did not reach) the BERT recipe's final \[MASK\]", out)
