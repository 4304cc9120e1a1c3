"""Config mistakes are one clear message before anything compiles, and one `error:` line from the
binaries: typos (with the nearest valid name), bad values, a batch or model the mesh cannot split,
a mesh the devices cannot hold. The binary's one-line errors for the same mistakes are cases of the
bad-input sweep (tests/e2e/test_bad_input_sweep.py, "train: config field typo" and others)."""

import os
import re
import subprocess
import sys

import pytest

from bert_jax import cli
from bert_jax.finetune import runs as finetune_runs
from bert_jax.training import config_check, pretrain
from configs import tiny
from support.golden import REPO


def tiny_config(**changes):
    config = tiny.get_config()
    config.mesh.num_devices = 0
    for dotted, value in changes.items():
        section, field = dotted.split("__")
        config[section][field] = value
    return config


@pytest.mark.parametrize(
    "changes, message",
    [
        # The issue's silent case: a negative rate trained (the loss rose) with exit 0.
        ({"optim__learning_rate": -1e-4}, r"optim.learning_rate=-0.0001 must be positive \(a neg"),
        ({"optim__learning_rate": 0.0}, r"optim.learning_rate=0.0 must be positive"),
        ({"optim__warmup_steps": 50}, r"warmup_steps=50 is longer than the schedule .*=20"),
        ({"optim__b2": 1.0}, r"optim.b2=1.0 must be a number in \[0, 1\)"),
        ({"train__global_batch_size": 12}, r"global_batch_size=12 must be divisible by .*\(8 ="),
        ({"train__grad_accum_steps": 0}, r"train.grad_accum_steps=0 must be a whole number >= 1"),
        ({"mesh__data": 3}, r"devices are not divisible by 3|needs .* devices, there are 8"),
        ({"mesh__data": 2, "mesh__fsdp": 2}, r"needs 4 devices, there are 8"),
        ({"mesh__data": -1, "mesh__tensor": 4}, r"mesh.tensor=4 must divide model.num_attent"),
        ({"mesh__num_devices": 16}, r"mesh.num_devices=16, but there are 8 devices"),
        ({"train__on_nonfinite": "ignore"}, r"train.on_nonfinite='ignore'; choose one of"),
        (
            {"checkpoint__max_to_keep": -1},
            r"max_to_keep=-1 must be a whole number >= 0 and below 2\*\*31 \(0 keeps",
        ),
        # Accepted silently before: a rate that float32 (the schedule's) holds as 0, a "decay"
        # that climbs, a batch warmup that never ends or grows nothing.
        ({"optim__learning_rate": 1e-46}, r"optim.learning_rate=1e-46 is 0 in float32"),
        (
            {"optim__end_learning_rate": 0.01},
            r"end_learning_rate=0.01 is above optim.learning_rate=0.001, the peak: the 'linear'",
        ),
        (
            {"train__batch_warmup_steps": 30, "train__grad_accum_steps": 2},
            r"train.batch_warmup_steps=30 is longer than the run \(train.num_train_steps=20\)",
        ),
        ({"train__batch_warmup_steps": 5}, r"batch_warmup_steps=5 grows nothing: train.batch_w"),
        # The splash kernel's tiles are whole 128-row blocks: a ValueError traceback before.
        (
            {"model__attention_impl": "splash", "data__max_seq_length": 64},
            r"attention_impl='splash' needs data.max_seq_length a multiple of 128, not 64",
        ),
    ],
)
def test_each_mistake_is_named_with_its_field(changes, message):
    with pytest.raises(cli.UserError, match=message):
        config_check.check_pretraining(tiny_config(**changes), num_devices=8)


@pytest.fixture(scope="module")
def records64(testdata, vocab_file, tmp_path_factory):
    """data_prep's records of 64 tokens (sample_text.txt), with their manifest."""
    out = tmp_path_factory.mktemp("records64")
    subprocess.run(
        [sys.executable, "-m", "data_prep.main", f"--input={testdata / 'sample_text.txt'}"]
        + [f"--vocab_file={vocab_file}", f"--output_dir={out}", "--max_seq_length=64"]
        + ["--max_predictions_per_seq=10", "--dupe_factor=1", "--num_workers=1", "--noprogress"],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.mark.parametrize(
    "changes",
    [
        {"optim__learning_rate": 1e-45},  # float32's smallest number: small, but not 0
        {"optim__end_learning_rate": 0.001},  # the peak: a flat schedule after warmup
        {"optim__end_learning_rate": 0.01, "optim__schedule": "constant"},  # end not used
        {
            "train__batch_warmup_steps": 20,
            "train__grad_accum_steps": 2,
            "train__global_batch_size": 16,
        },
    ],
)
def test_the_edges_of_those_rules_are_accepted(changes):
    config_check.check_pretraining(tiny_config(**changes), num_devices=8)


def test_splash_is_checked_against_the_manifests_length_too(records64):
    """With data.max_seq_length left to the manifest (0), the splash kernel's rule is checked on
    the length the records have (the kernel's ValueError traceback at the first eval before,
    attention dropout keeping training off the kernel), and again when a step is traced."""
    config = tiny_config(model__attention_impl="splash", data__max_seq_length=0)
    config.data.train_files, config.data.eval_files = str(records64), ""
    config.data.max_predictions_per_seq, config.model.vocab_size = 0, 0
    with pytest.raises(cli.UserError, match=r"data.max_seq_length a multiple of 128, not 64"):
        config_check.pretraining(config, num_devices=8)
    config.model.attention_impl = "auto"
    assert config_check.pretraining(config, num_devices=8).data.max_seq_length == 64


@pytest.mark.parametrize("configured", [0, 64])
@pytest.mark.parametrize("positions, ok", [(32, False), (63, False), (64, True), (512, True)])
def test_records_longer_than_the_position_table_are_a_config_error(
    records64, configured, positions, ok
):
    """Records of 64 tokens with model.max_position_embeddings below 64: found when the first
    step was traced before, after the workdir was made and the model initialized, in words that
    named no config field. Now a config problem naming both fields, before anything is built."""
    config = tiny_config(data__max_seq_length=configured, model__max_position_embeddings=positions)
    config.data.train_files, config.data.eval_files = str(records64), ""
    config.data.max_predictions_per_seq, config.model.vocab_size = 0, 0
    if ok:
        assert config_check.pretraining(config, num_devices=8).data.max_seq_length == 64
        return
    with pytest.raises(cli.UserError) as raised:
        config_check.pretraining(config, num_devices=8)
    assert f"model.max_position_embeddings={positions}: raise it to 64" in str(raised.value)
    assert "data.max_seq_length" in str(raised.value)


@pytest.mark.parametrize("rate", [0.15, 0.3])
def test_a_masking_rate_for_records_masked_by_data_prep_is_refused(records64, rate):
    """data.masked_lm_prob is dynamic masking's: with records data_prep masked it did nothing
    (the run trained at the records' rate, exit 0)."""
    config = tiny_config(data__max_seq_length=0, data__masked_lm_prob=rate)
    config.data.train_files, config.data.eval_files = str(records64), ""
    config.data.max_predictions_per_seq, config.model.vocab_size = 0, 0
    with pytest.raises(cli.UserError, match=rf"data.masked_lm_prob={rate} is for dynamic mask"):
        config_check.pretraining(config, num_devices=8)
    config.data.masked_lm_prob = None
    config_check.pretraining(config, num_devices=8)


def test_fine_tuning_checks_the_splash_length_too():
    config = finetuning_config()
    config.model.attention_impl, config.data.max_seq_length = "splash", 200
    with pytest.raises(cli.UserError, match=r"a multiple of 128, not 200"):
        check_finetuning(config)
    config.data.max_seq_length = 256
    check_finetuning(config)


def test_widths_the_tensor_axis_cannot_split():
    config = tiny_config(mesh__data=2, mesh__tensor=4)
    config.model.num_attention_heads, config.model.hidden_size = 4, 32
    config.model.intermediate_size = 66
    with pytest.raises(
        cli.UserError, match=r"mesh.tensor=4 must divide model.intermediate_size=66"
    ):
        config_check.check_pretraining(config, num_devices=8)
    config.model.intermediate_size = 64
    config_check.check_pretraining(config, num_devices=8)  # now it splits


def test_train_and_evaluate_checks_before_anything_else(tmp_path, monkeypatch):
    def fail(*_):
        raise AssertionError("the config check must come first")

    monkeypatch.setattr(pretrain, "make_setup", fail)
    with pytest.raises(cli.UserError, match=r"learning_rate=-0.001 must be positive"):
        pretrain.train_and_evaluate(tiny_config(optim__learning_rate=-1e-3), str(tmp_path))
    assert not os.listdir(tmp_path)  # no workdir content either


def assert_names_all(check, *parts):
    """`check` raises one cli.UserError, one line, that names every one of `parts`."""
    with pytest.raises(cli.UserError) as e:
        check()
    message = str(e.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)


def test_the_pretraining_pass_names_every_problem_at_once(tmp_path):
    """config_check.pretraining, bert_main's one pass: the mesh rules (sharding.py's rule),
    init_checkpoint's kind (checkpoints.model_dir_kind) and the data contract, in one error;
    fields out of their ranges before and alone (the data is not read)."""
    config = tiny_config(optim__learning_rate=-1e-3, train__init_optimizer_state=True)
    config.mesh.rules = (("batch", ("data", "pipeline")),)
    config.data.masked_lm_prob = 1.5
    config.data.train_files = str(tmp_path / "nope")
    assert_names_all(
        lambda: config_check.pretraining(config, num_devices=8),
        "optim.learning_rate=-0.001 must be positive",
        "data.masked_lm_prob=1.5 must be a number in (0, 1]",
    )
    with pytest.raises(cli.UserError) as e:
        config_check.pretraining(config, num_devices=8)
    assert "pipeline" not in str(e.value) and "no record files" not in str(e.value)
    config.optim.learning_rate, config.data.masked_lm_prob = 1e-3, None
    assert_names_all(
        lambda: config_check.pretraining(config, num_devices=8),
        "names unknown mesh axes ['pipeline']",
        "init_optimizer_state needs train.init_checkpoint",
        "no record files match",
    )
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for init, says in (
        ("hf", r"init_optimizer_state needs a training workdir of ours, but .* is a Hugging Face"),
        ("empty", r"train.init_checkpoint: .* has no config.json .* and no checkpoints/"),
    ):
        config = tiny_config(train__init_checkpoint=str(tmp_path / init))
        config.train.init_optimizer_state = init == "hf"
        with pytest.raises(cli.UserError, match=says):
            config_check.check_pretraining(config, num_devices=8)


@pytest.mark.parametrize("trainer", ["pretraining", "finetuning"])
@pytest.mark.parametrize(
    "field, value",
    [("dtype", "float16"), ("dtype", "Float32"), ("dtype", ""), ("attention_impl", "AUTO")],
)
def test_a_model_choice_out_of_its_set_is_the_configs_own_problem(trainer, field, value):
    """Fine-tuning's --config.model.dtype=float16 was reported at the model's build as a fault
    of the --init model's config.json; both trainers now name the config field up front."""
    make, check = TRAINERS[trainer]
    config = make()
    config.model[field] = value
    with pytest.raises(cli.UserError, match=rf"model.{field}={value!r}; choose one of"):
        check(config)


def test_fine_tuning_refuses_two_different_pre_trained_models():
    """--init and --config.init naming two models: the flag won silently (the config's was
    neither used nor mentioned)."""
    from configs.finetune import base

    config = base.get_config()
    config.data.train_file, config.init = "train.tsv", "model_b"
    two = r"--init='model_a' and config\.init='model_b' name two"
    with pytest.raises(cli.UserError, match=two):
        finetune_runs.check_finetuning(config, num_devices=8, init="model_a")
    for init in ("model_b", None, ""):  # the same one twice, or either alone
        finetune_runs.check_finetuning(config, num_devices=8, init=init)


def test_the_finetuning_pass_names_every_problem_at_once():
    """finetune.runs.check_finetuning, bert_jax.finetune's one pass
    (finetune.train.finetune runs it first): before, these were found one at a time, the later
    ones after the model loaded."""
    from configs.finetune import base

    config = base.get_config()
    config.data.update(train_file="", max_seq_length=4)
    config.lora.update(rank=4, targets=("queries",))
    config.data.labels = ("neg", "pos", "neg")
    assert_names_all(
        lambda: finetune_runs.check_finetuning(config, num_devices=8),
        "data.train_file is empty",
        "no pre-trained model: pass --init=DIR",
        "data.max_seq_length=4 leaves no room for text: at least 5 needed",
        "LoRA targets ['queries']",
        "data.labels names 'neg' more than once",
    )
    config.optim.learning_rate = -1.0  # a field out of its range: named alone
    with pytest.raises(cli.UserError, match=r"^config: optim.learning_rate=-1.0 must be positi"):
        finetune_runs.check_finetuning(config, num_devices=8)
    config = base.get_config()
    config.data.update(train_file="train.tsv", format="squad", max_seq_length=64)
    with pytest.raises(cli.UserError, match=r"max_seq_length=64 must exceed max_query_length=64"):
        finetune_runs.check_finetuning(config, num_devices=8, init="model")
    config = base.get_config()
    config.data.train_file, config.train.batch_size = "train.tsv", 12
    with pytest.raises(
        cli.UserError,
        match=r"batch_size=12 must be divisible by the 8 data-parallel devices \(mesh data 8 x",
    ):
        finetune_runs.check_finetuning(config, num_devices=8, init="model")
    config.train.batch_size = 16
    finetune_runs.check_finetuning(config, num_devices=8, init="model")
    # The splash kernel takes whole 128-token tiles: a traceback at the first eval before.
    config.model.attention_impl, config.data.max_seq_length = "splash", 48
    with pytest.raises(cli.UserError, match=r"'splash' needs data.max_seq_length a multiple of"):
        finetune_runs.check_finetuning(config, num_devices=8, init="model")
    config.data.max_seq_length = 128
    finetune_runs.check_finetuning(config, num_devices=8, init="model")
    config.model.attention_impl = "auto"
    # The eval's batch splits the same way: found by the first eval, after all the training.
    config.eval.batch_size = 12
    with pytest.raises(cli.UserError, match=r"eval.batch_size=12 must be divisible by the 8 data"):
        finetune_runs.check_finetuning(config, num_devices=8, init="model")


# --- The numeric fields' table, swept --------------------------------------------------------


def pretraining_config():
    return tiny_config()


def finetuning_config():
    from configs.finetune import base

    config = base.get_config()
    config.data.train_file = "train.tsv"
    return config


def check_pretraining(config):
    config_check.pretraining(config, num_devices=8)  # fields out of range: before the data


def check_finetuning(config):
    finetune_runs.check_finetuning(config, num_devices=8, init="model")


TRAINERS = {
    "pretraining": (pretraining_config, check_pretraining),
    "finetuning": (finetuning_config, check_finetuning),
}


def numeric_fields(config) -> list[str]:
    """Every field of `config` that holds (or, a placeholder, is typed to hold) a number."""
    out = []
    for section, fields in config.items():
        if not hasattr(fields, "items"):
            continue
        for name, value in fields.items():
            kind = fields.get_type(name)
            if kind in (int, float) or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
            ):
                out.append(f"{section}.{name}")
    return out


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_numeric_field_has_a_range_and_the_configs_keep_them(trainer):
    make, _ = TRAINERS[trainer]
    fields = numeric_fields(make())
    assert set(fields) <= set(config_check.NUMERIC_FIELDS), sorted(
        set(fields) - set(config_check.NUMERIC_FIELDS)
    )
    from configs import bert_base, bert_large, cpu, default, demo, mini, tiny
    from configs.finetune import conll, mnli, squad, squad_v2, sst2, sst2_lora, stsb

    for module in (default, tiny, mini, cpu, demo, bert_base, bert_large):
        assert config_check.range_problems(module.get_config()) == [], module.__name__
    for module in (sst2, sst2_lora, mnli, stsb, conll, squad, squad_v2):
        assert config_check.range_problems(module.get_config()) == [], module.__name__


def bad_values(rule: config_check.Range) -> list:
    """NaN, the infinities, a negative number, zero, a value past the upper bound and (for whole
    numbers) one with a fraction and a bool (a float field holds True as 1.0): those of them
    `rule` refuses."""
    past = [rule.high + 1] if rule.high is not None else [2**31, 2**63] if rule.whole else []
    whole = [2.5, True, -(2**63)] if rule.whole else []
    values = [float("nan"), float("inf"), float("-inf"), -3, -0.5, 0, *past, *whole]
    return [v for v in values if v not in rule]


SWEEP = [
    (trainer, field, value)
    for trainer, (make, _) in TRAINERS.items()
    for field in numeric_fields(make())
    for value in bad_values(config_check.NUMERIC_FIELDS[field])
]


@pytest.mark.parametrize(
    "trainer, field, value", SWEEP, ids=[f"{t}-{f}={v!r}" for t, f, v in SWEEP]
)
def test_a_field_out_of_its_range_is_the_one_error_naming_it(trainer, field, value):
    """The issue's cases among them: optim.weight_decay=nan trained as weight decay 0,
    fine-tuning took eval.every_steps=-3, a warmup_proportion of 2 was reported as a warmup_steps
    nobody set, a negative max_grad_norm named weight_decay too, a negative num_train_steps came
    with a clause about a num_train_steps of 1, a negative dropout blamed the --init config.json."""
    make, check = TRAINERS[trainer]
    config = make()
    section, name = field.split(".")
    with config.unlocked(), config[section].ignore_type():
        config[section][name] = value
    value = config[section][name]  # as the config holds it: a float field makes -3 a -3.0
    with pytest.raises(cli.UserError) as e:
        check(config)
    message = str(e.value)
    assert message.startswith(f"config: {field}={value!r} "), message
    assert ";" not in message, message  # one problem
    others = [f for f in config_check.NUMERIC_FIELDS if f != field and f"{f}=" in message]
    assert not others, message


def test_the_sweep_covers_the_issues_cases():
    cases = {(t, f, repr(v)) for t, f, v in SWEEP}
    for case in [
        ("pretraining", "optim.weight_decay", "nan"),
        ("finetuning", "eval.every_steps", "-3"),
        ("finetuning", "model.hidden_dropout_prob", "-0.5"),
        ("finetuning", "optim.warmup_proportion", "2"),
        ("pretraining", "optim.max_grad_norm", "-3"),
        ("pretraining", "train.num_train_steps", "-3"),
    ]:
        assert case in cases, case


@pytest.mark.parametrize("edit", ["rename", "repeat"])
def test_a_mesh_rule_for_a_name_the_model_lacks_or_a_name_twice_is_refused(edit):
    """Every edit of the shipped rules that renames one logical axis (a typo: the weights it
    meant to split stayed whole, silently) or repeats one (parameters followed the last rule,
    activations the first) is one error naming it; the shipped rules pass."""
    assert not [p for p in config_check.pretraining_problems(tiny_config(), 8) if "rules" in p]
    shipped = tuple(tiny.get_config().mesh.rules)
    for i, (name, axes) in enumerate(shipped):
        rules = list(shipped)
        if edit == "rename":
            rules[i] = (name[:-1], axes)
            want = f"mesh.rules names logical axes the model does not have: ['{name[:-1]}']"
        else:
            rules.append((name, axes))
            want = f"mesh.rules has more than one rule for ['{name}']"
        problems = config_check.pretraining_problems(tiny_config(mesh__rules=tuple(rules)), 8)
        assert any(want in p for p in problems), (rules, problems)


@pytest.mark.parametrize("num_devices", range(1, 8))
def test_a_mesh_that_does_not_fit_num_devices_names_that_limit(num_devices):
    """On 8 devices, config.mesh.num_devices=N and a mesh that needs 8 (or does not divide N):
    the error said "there are N" devices and to set data=-1 "to use them all", which would still
    use N; it now names num_devices as the limit."""
    for mesh in ({"data": 8}, {"data": -1, "fsdp": 3 if num_devices % 3 else 5}):
        config = tiny_config(
            mesh__num_devices=num_devices, **{f"mesh__{k}": v for k, v in mesh.items()}
        )
        problems = config_check.pretraining_problems(config, num_devices=8)
        assert len(problems) == 1 and f"config.mesh.num_devices={num_devices}:" in problems[0], (
            problems
        )
    config = tiny_config(mesh__data=16)  # no num_devices: the machine's count is the limit
    assert "num_devices" not in " ".join(config_check.pretraining_problems(config, num_devices=8))


@pytest.mark.parametrize(
    "fields, metric, names, good",
    [
        ({}, "acuracy", "['accuracy', 'mcc', 'f1']", "f1"),  # SST-2's layout: two labels
        ({"layout": "mnli"}, "f1", "'macro_f1', 'precision/contradiction'", "recall/neutral"),
        ({"layout": "stsb"}, "accuracy", "['pearson', 'spearman', 'mse']", "spearman"),
        ({"format": "conll"}, "exact", "['precision', 'recall', 'f1', 'accuracy']", "f1"),
        ({"format": "squad", "max_seq_length": 384}, "em", "['exact', 'f1', 'has_ans", "exact"),
    ],
)
def test_fine_tuning_refuses_a_metric_the_eval_does_not_give(fields, metric, names, good):
    # The eval line shows config.data.metric: a name no figure has showed nothing, all run long.
    config = finetuning_config()
    config.data.update(**fields)
    config.data.metric = metric
    with pytest.raises(cli.UserError, match=rf"data.metric='{metric}' is not .*{re.escape(names)}"):
        finetune_runs.check_finetuning(config, num_devices=8, init="model")
    config.data.metric = good
    finetune_runs.check_finetuning(config, num_devices=8, init="model")
