"""`python -m bert_jax.finetune.glue_table`: one command fine-tunes a pre-trained model on the
tasks of a directory in GLUE's layout (made here from learnable synthetic files) and prints one
score table, whose figures are each task's run's own; run again, it reads them back."""

import json

import pytest

from bert_jax.finetune import glue_table
from support.finetune_data import mnli_file, sst2_file, stsb_file

pytestmark = pytest.mark.slow  # three fine-tuning runs in a forked process

OVERRIDES = ",".join(
    [
        "mesh.num_devices=2",
        "model.hidden_dropout_prob=0.0",
        "model.attention_probs_dropout_prob=0.0",
        "optim.learning_rate=1e-3",
        "train.batch_size=16",
        "train.num_epochs=4.0",
        "eval.batch_size=32",
        "data.max_seq_length=32",
        "checkpoint.async_save=False",
    ]
)


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    """SST-2, MNLI (matched and mismatched dev sets) and STS-B in GLUE's layout, and a CoLA
    directory the run is not asked for."""
    d = tmp_path_factory.mktemp("glue")
    for folder in ("SST-2", "MNLI", "STS-B", "CoLA"):
        (d / folder).mkdir()
    sst2_file(d / "SST-2" / "train.tsv", 192, 0)
    sst2_file(d / "SST-2" / "dev.tsv", 64, 1)
    mnli_file(d / "MNLI" / "train.tsv", 192, 0)
    mnli_file(d / "MNLI" / "dev_matched.tsv", 48, 1)
    mnli_file(d / "MNLI" / "dev_mismatched.tsv", 48, 2)
    stsb_file(d / "STS-B" / "train.tsv", 192, 0)
    stsb_file(d / "STS-B" / "dev.tsv", 64, 1)
    return d


def test_one_command_prints_one_table_of_every_tasks_figures(
    forkserver, tiny_hf, glue_dir, tmp_path
):
    args = [
        f"--init={tiny_hf}",
        f"--glue_dir={glue_dir}",
        f"--workdir={tmp_path}",
        "--tasks=sst2,mnli,stsb",
        f"--overrides={OVERRIDES}",
    ]
    status, out, err = forkserver.run("bert_jax.finetune.glue_table", args, timeout=900)
    assert status == 0, err[-3000:]
    results = json.loads((tmp_path / "glue_results.json").read_text())
    assert list(results) == ["sst2", "mnli", "stsb"]
    assert set(results["mnli"]) == {"m", "mm"} and set(results["stsb"]) == {"pearson", "spearman"}
    # The table's figures are each run's own final eval, as its metrics.jsonl logged it.
    for task, stem_metric in (("sst2", ("dev", "accuracy")), ("mnli", ("dev_matched", "accuracy"))):
        logged = [
            json.loads(line)
            for line in (tmp_path / task / "metrics.jsonl").read_text().splitlines()
        ]
        last = [r for r in logged if r.get("split") == "eval"][-1]
        key = f"{stem_metric[0]}/{stem_metric[1]}"
        column = "acc" if task == "sst2" else "m"
        assert results[task][column] == pytest.approx(last[key]), (task, last)
    assert results["sst2"]["acc"] > 0.9  # the keyword task is learnt: real runs, not stubs
    table = (tmp_path / "glue_table.md").read_text()
    assert table.strip() in out
    scores = [100 * sum(r.values()) / len(r) for r in results.values()]
    assert f"| average | 3 tasks | {sum(scores) / 3:.2f} |" in table
    assert f"| mnli | m {100 * results['mnli']['m']:.2f} / mm " in table
    # Again: the finished tasks' figures are read back, nothing trains.
    status, again, err = forkserver.run("bert_jax.finetune.glue_table", args, timeout=300)
    assert status == 0 and table.strip() in again and "fine-tuning" not in again, err[-2000:]
    # Other settings in the same workdir: refused, not mixed.
    changed = OVERRIDES.replace("train.num_epochs=4.0", "train.num_epochs=1.0")
    other = [*args[:-1], f"--overrides={changed}"]
    status, _, err = forkserver.run("bert_jax.finetune.glue_table", other, timeout=300)
    assert status == 2 and "other settings" in err


def test_task_choice_and_overrides_are_checked(glue_dir, tmp_path):
    assert [t.name for t in glue_table.pick_tasks(str(glue_dir), None)] == [
        "cola",
        "sst2",
        "stsb",
        "mnli",
    ]
    with pytest.raises(ValueError, match=r"no task directory .*RTE"):
        glue_table.pick_tasks(str(glue_dir), ["sst2", "rte"])
    with pytest.raises(ValueError, match="unknown"):
        glue_table.pick_tasks(str(glue_dir), ["squad"])
    with pytest.raises(ValueError, match="not FIELD=VALUE"):
        glue_table.parse_overrides(["learning_rate"])
    overrides = glue_table.parse_overrides(["optim.learning_rate=3e-5", "data.metric=f1"])
    config = glue_table.task_config(glue_table.TASKS["rte"], str(glue_dir), overrides)
    assert config.optim.learning_rate == 3e-5 and config.data.layout == "rte"
    assert config.data.metric == "f1"
    assert config.data.train_file.endswith("RTE/train.tsv")
    with pytest.raises(ValueError, match="cannot be set"):
        glue_table.task_config(glue_table.TASKS["rte"], str(glue_dir), {"optim.learning_rat": 1.0})
