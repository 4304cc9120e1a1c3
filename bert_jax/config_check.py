"""A config checked before anything compiles: every mistake found is named, with its field.

`check_pretraining` runs first in train.train_and_evaluate (so in bert_jax.main too) and
`check_common` in the fine-tuning binary, before the mesh, the model or a jitted step exists:
a negative learning rate, a batch that does not split over the mesh or a mesh that does not
match the devices is one `error:` line in a second, not a traceback from deep inside jit (or,
worse, a run that trains with exit 0: a negative learning rate climbs the loss).

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
    layout) on `num_devices` devices in `process_count` processes."""
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
        dp = sizes[0] * sizes[1]
        if t.global_batch_size % (t.grad_accum_steps * dp):
            problems.append(
                f"train.global_batch_size={t.global_batch_size} must be divisible by "
                f"train.grad_accum_steps ({t.grad_accum_steps}) x the data-parallel devices "
                f"({dp} = mesh data {sizes[0]} x fsdp {sizes[1]})"
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
    if problems:
        raise cli.UserError("config: " + "; ".join(problems))
