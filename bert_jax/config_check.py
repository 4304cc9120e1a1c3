"""A config checked before anything compiles: every mistake found is named, with its field.

Each binary has one validation pass, run first, before the mesh, the model or a jitted step
exists: `pretraining` in train.train_and_evaluate (so in bert_jax.main too), `check_finetuning` in
finetune.train.finetune (so in bert_jax.finetune too). A negative learning rate, a batch that does
not split over the mesh, a mesh that does not match the devices, an init directory of the wrong
kind or a data contract the config contradicts is one `error:` line naming every problem, in a
second, not a traceback from deep inside jit (or, worse, a run that trains with exit 0: a negative
learning rate climbs the loss). The rules stay in their homes (sharding.py's mesh rules,
masking.py's, pretrained.kind, lora.problems, features.check_seq_length); this module asks them
all and collects the answers.

Unknown config keys are answered at flag parsing, by bert_jax.cli (the nearest valid name).
No JAX import at module level: the binaries import this before JAX starts.
"""

import math

from bert_jax import cli, sharding
from bert_jax.faults import NONFINITE_MODES

BAD_RECORD_MODES = ("error", "skip")  # config.data.bad_records (bert_jax/input_pipeline.py)
MAX_SEED = 2**31  # train.seed: numpy's and Grain's generators refuse negative seeds


def _mesh_sizes(mesh, num_devices: int, problems: list[str]) -> tuple[int, int, int] | None:
    try:
        return sharding.mesh_shape(mesh.data, mesh.fsdp, mesh.tensor, num_devices)
    except ValueError as e:
        problems.append(str(e))
        return None


def _ask(problems: list[str], rule, *args) -> None:
    """Runs a rule that raises ValueError (cli.UserError is one); its message becomes a problem."""
    try:
        rule(*args)
    except ValueError as e:
        problems.append(str(e))


def _raise(problems: list[str]) -> None:
    if problems:
        raise cli.UserError("config: " + "; ".join(problems))


def check_common(
    config, num_devices: int, process_count: int = 1, num_train_steps: int | None = None
) -> list[str]:
    """Problems with the optimizer, non-finite mode and mesh sections (shared by pre-training and
    fine-tuning).

    `num_train_steps` is None where it is not known yet (fine-tuning counts the data first).
    """
    problems = []
    o = config.optim
    if not (isinstance(o.learning_rate, (int, float)) and math.isfinite(o.learning_rate)):
        problems.append(f"optim.learning_rate={o.learning_rate!r} must be a positive number")
    elif o.learning_rate <= 0:
        problems.append(
            f"optim.learning_rate={o.learning_rate} must be positive (a negative rate climbs "
            "the loss; the paper's BERT-Base used 1e-4)"
        )
    if o.end_learning_rate < 0:
        problems.append(f"optim.end_learning_rate={o.end_learning_rate} must be >= 0")
    if o.warmup_steps < 0:
        problems.append(f"optim.warmup_steps={o.warmup_steps} must be >= 0")
    elif num_train_steps is not None and o.warmup_steps > num_train_steps:
        problems.append(
            f"optim.warmup_steps={o.warmup_steps} is longer than the schedule "
            f"(train.num_train_steps={num_train_steps}); warm up over part of it"
        )
    for name in ("b1", "b2"):
        if not 0 <= o[name] < 1:
            problems.append(f"optim.{name}={o[name]} must lie in [0, 1)")
    if o.eps <= 0:
        problems.append(f"optim.eps={o.eps} must be positive")
    if o.weight_decay < 0 or o.max_grad_norm < 0:
        problems.append(
            f"optim.weight_decay={o.weight_decay} and optim.max_grad_norm={o.max_grad_norm} "
            "must be >= 0 (0 turns them off)"
        )
    seed = config.train.get("seed", 0)
    if not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
        problems.append(
            f"train.seed={seed!r} must be a whole number in [0, 2**31): numpy's and Grain's "
            "generators take no negative seed"
        )
    mode = config.train.get("on_nonfinite", "stop")
    if mode not in NONFINITE_MODES:
        problems.append(f"train.on_nonfinite={mode!r}; choose one of {NONFINITE_MODES}")

    m = config.mesh
    if m.num_devices < 0 or m.num_devices > num_devices:
        problems.append(
            f"mesh.num_devices={m.num_devices}, but there are {num_devices} devices; "
            "0 uses them all"
        )
    elif m.num_devices:
        if process_count > 1:
            problems.append("mesh.num_devices is for single-process runs; set it to 0")
        num_devices = m.num_devices
    _ask(problems, sharding.normalize_rules, m.rules)
    sizes = _mesh_sizes(m, num_devices, problems)
    if sizes is not None:
        tensor = sizes[2]
        model = config.model
        for name in ("num_attention_heads", "intermediate_size"):
            value = model.get(name)
            if value is not None and value % tensor:
                problems.append(
                    f"mesh.tensor={tensor} must divide model.{name}={value}: the tensor axis "
                    "splits attention heads and the MLP width"
                )
    return problems


def check_pretraining(config, num_devices: int, process_count: int = 1) -> None:
    """Raises cli.UserError naming every problem of a pre-training config (configs/default.py's
    layout) on `num_devices` devices in `process_count` processes, without reading its data."""
    _raise(pretraining_problems(config, num_devices, process_count))


def pretraining_problems(config, num_devices: int, process_count: int = 1) -> list[str]:
    t, e = config.train, config.eval
    problems = []
    if t.num_train_steps < 1:
        problems.append(f"train.num_train_steps={t.num_train_steps} must be >= 1")
    problems += check_common(config, num_devices, process_count, max(t.num_train_steps, 1))
    for name, value in (
        ("train.global_batch_size", t.global_batch_size),
        ("train.grad_accum_steps", t.grad_accum_steps),
        ("train.log_every_steps", t.log_every_steps),
        ("eval.batch_size", e.batch_size),
    ):
        if value < 1:
            problems.append(f"{name}={value} must be >= 1")
    for name, value in (
        ("train.stop_at_step", t.stop_at_step),
        ("eval.every_steps", e.every_steps),
        ("checkpoint.every_steps", config.checkpoint.every_steps),
        ("checkpoint.max_to_keep", config.checkpoint.max_to_keep),
    ):
        if value < 0:
            problems.append(f"{name}={value} must be >= 0 (0 turns it off)")
    d = config.data
    if d.get("bad_records", "error") not in BAD_RECORD_MODES:
        problems.append(f"data.bad_records={d.bad_records!r}; choose one of {BAD_RECORD_MODES}")
    if d.get("max_bad_records", 0) < 0:
        problems.append(f"data.max_bad_records={d.max_bad_records} must be >= 0")
    devices = config.mesh.num_devices or num_devices
    sizes = None if problems else _mesh_sizes(config.mesh, devices, problems)
    if sizes is not None:
        dp, axes = _data_parallel(sizes, config.mesh.rules)
        if t.global_batch_size % (t.grad_accum_steps * dp):
            problems.append(
                f"train.global_batch_size={t.global_batch_size} must be divisible by "
                f"train.grad_accum_steps ({t.grad_accum_steps}) x the data-parallel devices "
                f"({dp} = {axes})"
            )
        if t.global_batch_size % process_count:
            problems.append(
                f"train.global_batch_size={t.global_batch_size} must be divisible by the "
                f"{process_count} processes"
            )
        if config.data.eval_files and e.batch_size % math.lcm(dp, process_count):
            problems.append(
                f"eval.batch_size={e.batch_size} must be divisible by the {dp} data-parallel "
                f"devices and the {process_count} processes"
            )
    if d.get("masked_lm_prob") is not None and not 0.0 < d.masked_lm_prob <= 1.0:
        problems.append(f"data.masked_lm_prob={d.masked_lm_prob} must be in (0, 1]")
    return problems + _init_problems(t)


def _data_parallel(sizes: tuple[int, int, int], rules) -> tuple[int, str]:
    """(how many ways a batch is split, which mesh axes: "mesh data 8 x fsdp 1")."""
    axes = sharding.data_parallel_axes(dict(zip(sharding.MESH_AXES, sizes)), rules)
    return math.prod(axes.values()), "mesh " + " x ".join(f"{a} {n}" for a, n in axes.items())


def _init_problems(t) -> list[str]:
    """train.init_checkpoint and init_optimizer_state: a directory of the kind they need
    (pretrained.kind, the one rule), checked before the run builds anything."""
    if not t.init_checkpoint:
        if t.init_optimizer_state:
            return [
                "train.init_optimizer_state needs train.init_checkpoint: the workdir of the run "
                "to continue (e.g. phase 1's)"
            ]
        return []
    from bert_jax import pretrained  # here: a config without init_checkpoint needs no model code

    try:
        kind = pretrained.kind(t.init_checkpoint)
    except ValueError as e:
        return [f"train.init_checkpoint: {e}"]
    if t.init_optimizer_state and kind != pretrained.WORKDIR:
        return [
            f"train.init_optimizer_state needs a training workdir of ours, but "
            f"train.init_checkpoint={t.init_checkpoint!r} is a Hugging Face directory (no "
            "optimizer state): drop init_optimizer_state to start from its weights"
        ]
    return []


def pretraining(config, num_devices: int, process_count: int = 1):
    """bert_jax.main's one validation pass: check_pretraining's problems, the data contract's
    (data_contract.resolve: the manifests against the config) and what only the resolved data
    can tell (dynamic masking's settings and vocabulary), all in one cli.UserError. Returns the
    resolved config."""
    from bert_jax import data_contract, input_pipeline  # here: they need the data's files

    problems = pretraining_problems(config, num_devices, process_count)
    try:
        resolved = data_contract.resolve(config)
        if resolved.data.nsp and not resolved.model.get("nsp_head", True):
            problems.append(
                "model.nsp_head=False, but the records are sentence pairs for NSP (data.nsp): "
                "pass MLM-only records (data_prep --nsp=false) or set model.nsp_head=True"
            )
        if resolved.data.dynamic_masking:
            facts = data_contract.DataFacts.from_data(resolved.data)
            input_pipeline.masking_steps(facts, resolved.data, resolved.model.vocab_size)
    except (ValueError, FileNotFoundError, NotADirectoryError) as e:
        if not problems:
            raise  # the data's own error, as it is
        problems.append(str(e))
    _raise(problems)
    return resolved


def check_finetuning(
    config, num_devices: int, process_count: int = 1, init: str | None = None
) -> None:
    """bert_jax.finetune's one validation pass (a configs/finetune/base.py config; `init`, else
    config.init, the pre-trained model): every problem found before the model is loaded or a
    file read, in one cli.UserError."""
    from bert_jax import features
    from bert_jax.finetune import lora, squad, tasks  # here: pre-training needs none of them

    t, d = config.train, config.data
    problems = check_common(config, num_devices, process_count)
    if not d.train_file:
        problems.append("data.train_file is empty: point it at the training file")
    if not (init or config.init):
        problems.append(
            "no pre-trained model: pass --init=DIR (a Hugging Face BERT directory or a "
            "pre-training workdir of ours)"
        )
    if d.format not in tasks.FORMATS:
        problems.append(f"data.format={d.format!r}; choose one of {sorted(tasks.FORMATS)}")
    elif d.format == "squad":
        problems += squad.length_problems(d.max_seq_length, d.doc_stride, d.max_query_length)
    else:  # glue: sentence pairs or single texts (a pair's room); conll: one sentence
        segments = 2 if d.format == "glue" else 1
        _ask(problems, features.check_seq_length, d.max_seq_length, segments, "data.max_seq_length")
    if t.num_epochs <= 0 or t.batch_size < 1:
        problems.append(
            f"train.num_epochs ({t.num_epochs}) and train.batch_size ({t.batch_size}) "
            "must be positive"
        )
    if config.eval.batch_size < 1:
        problems.append(f"eval.batch_size={config.eval.batch_size} must be >= 1")
    if config.lora.rank < 0:
        problems.append(f"lora.rank={config.lora.rank} must be >= 0 (0: full fine-tuning)")
    elif config.lora.rank:
        problems += lora.problems(tuple(config.lora.targets), config.lora.rank, config.lora.alpha)
    devices = config.mesh.num_devices or num_devices
    sizes = None if problems else _mesh_sizes(config.mesh, devices, problems)
    if sizes is not None:
        dp, axes = _data_parallel(sizes, config.mesh.rules)
        if t.batch_size % dp:
            problems.append(
                f"train.batch_size={t.batch_size} must be divisible by the {dp} data-parallel "
                f"devices ({axes})"
            )
        if t.batch_size % process_count:
            problems.append(
                f"train.batch_size={t.batch_size} must be divisible by the {process_count} "
                "processes"
            )
    _raise(problems)
