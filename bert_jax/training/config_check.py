"""A config checked before anything compiles, every mistake named with its field: pre-training's
one pass and the parts of fine-tuning's, collecting the rules' cli.UserErrors from their homes.
No JAX import at module level: the binaries import this before JAX starts. docs/faults.md.
"""

import dataclasses
import math

from bert_jax import cli
from bert_jax.model import attention, bert_config, sharding
from bert_jax.training.faults import NONFINITE_MODES

BAD_RECORD_MODES = ("error", "skip")  # config.data.bad_records (bert_jax/data/input/pipeline.py)
# A whole-number field's bound where its rule names none: such values are int32 on the devices.
MAX_WHOLE = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Range:
    """A numeric field's values: [low, high] (None: unbounded; `open_*` exclude the bound), whole
    or any finite number, or one of `also`; `note` says what they or a bound mean."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    whole: bool = False
    also: tuple = ()
    note: str = ""

    def __contains__(self, value) -> bool:
        if value in self.also and (value is None or type(value) is int):
            return True
        number = isinstance(value, int if self.whole else (int, float))
        if isinstance(value, bool) or not number or not math.isfinite(value):
            return False
        if self.whole and abs(value) > MAX_WHOLE:
            return False
        low_ok = self.low is None or (value > self.low if self.open_low else value >= self.low)
        high_ok = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return low_ok and high_ok

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        if self.low == 0 and self.open_low and self.high is None and not self.whole:
            return "positive" + (f" ({self.note})" if self.note else "")
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            where = f" in {left}{_number(self.low)}, {_number(self.high)}{right}"
        elif self.low is not None:
            where = f" {'>' if self.open_low else '>='} {_number(self.low)}"
        elif self.high is not None:
            where = f" {'<' if self.open_high else '<='} {_number(self.high)}"
        else:
            where = " (finite)"
        if self.whole and self.high is None:  # MAX_WHOLE's bound
            where = f"{where} and below 2**31" if self.low is not None else " within ±(2**31 - 1)"
        also = "".join(f", or {v!r}" for v in self.also)
        return kind + where + also + (f" ({self.note})" if self.note else "")


def _number(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


_WHOLE_1 = Range(1, whole=True)
_PROBABILITY = Range(0, 1, open_high=True)
_POSITIVE = Range(0, open_low=True)
_TOKEN_ID = Range(0, whole=True, also=(None,), note="None: from the manifest")
_NO_NEGATIVE_SEED = "numpy's and Grain's generators take no negative seed"
_MESH_AXIS = Range(1, whole=True, also=(-1,), note="-1 takes the devices the other axes leave")

# Every numeric field of both trainers' configs, one rule each.
NUMERIC_FIELDS = {
    "model.vocab_size": Range(0, whole=True, note="0: the data's vocabulary size"),
    "model.hidden_size": _WHOLE_1,
    "model.num_hidden_layers": _WHOLE_1,
    "model.num_attention_heads": _WHOLE_1,
    "model.intermediate_size": _WHOLE_1,
    "model.hidden_dropout_prob": _PROBABILITY,
    "model.attention_probs_dropout_prob": _PROBABILITY,
    "model.classifier_dropout": Range(0, 1, open_high=True, also=(None,), note="None: --init's"),
    "model.max_position_embeddings": _WHOLE_1,
    "model.type_vocab_size": Range(0, whole=True, note="0: no token types (ModernBERT)"),
    "model.global_rope_theta": _POSITIVE,
    "model.local_rope_theta": _POSITIVE,
    "model.local_attention": Range(0, whole=True, note="0: full attention in every layer"),
    "model.global_attn_every_n_layers": _WHOLE_1,
    "model.initializer_range": _POSITIVE,
    "model.layer_norm_eps": _POSITIVE,
    "data.max_bad_records": Range(0, whole=True),
    "data.max_seq_length": Range(0, whole=True, note="0: pre-training takes it from the manifest"),
    "data.max_predictions_per_seq": Range(0, whole=True, note="0: from the manifest"),
    "data.masked_lm_prob": Range(0, 1, open_low=True, also=(None,), note="None: 0.15"),
    "data.eval_masked_lm_prob": Range(
        0, 1, open_low=True, also=(None,), note="None: the training's rate"
    ),
    "data.vocab_size": Range(0, whole=True, note="0: from the manifest"),
    "data.cls_token_id": _TOKEN_ID,
    "data.sep_token_id": _TOKEN_ID,
    "data.mask_token_id": _TOKEN_ID,
    "data.num_workers": Range(0, whole=True, note="0: in the training process"),
    "data.read_threads": _WHOLE_1,
    "data.prefetch_buffer_size": Range(0, whole=True),
    "data.pack_max_examples": _WHOLE_1,
    "data.pack_window": _WHOLE_1,
    "data.tag_column": Range(whole=True, note="a column index, -1 the last"),
    "data.doc_stride": _WHOLE_1,
    "data.max_query_length": _WHOLE_1,
    "data.max_answer_length": _WHOLE_1,
    "data.n_best_size": _WHOLE_1,
    "data.null_score_diff_threshold": Range(),
    "optim.learning_rate": Range(
        0, open_low=True, note="a negative rate climbs the loss, the paper's BERT-Base used 1e-4"
    ),
    "optim.warmup_steps": Range(0, whole=True),
    "optim.warmup_proportion": Range(0, 1, note="the share of the run spent warming up"),
    "optim.power": Range(0, note="0: constant after warmup"),
    "optim.decay_fraction": Range(0, 1, note="the share of a wsd schedule spent decaying"),
    "optim.end_learning_rate": Range(0),
    "optim.weight_decay": Range(0, note="0 turns it off"),
    "optim.b1": _PROBABILITY,
    "optim.b2": _PROBABILITY,
    "optim.eps": _POSITIVE,
    "optim.max_grad_norm": Range(0, note="0 turns clipping off"),
    "train.global_batch_size": _WHOLE_1,
    "train.batch_size": _WHOLE_1,
    "train.grad_accum_steps": _WHOLE_1,
    "train.batch_warmup_steps": Range(0, whole=True, note="0 turns batch-size warmup off"),
    "train.batch_warmup_start_accum": _WHOLE_1,
    "train.num_train_steps": _WHOLE_1,
    "train.num_epochs": _POSITIVE,
    "train.seed": Range(0, 2**31, open_high=True, whole=True, note=_NO_NEGATIVE_SEED),
    "train.log_every_steps": _WHOLE_1,
    "train.stop_at_step": Range(0, whole=True, note="0 turns it off"),
    "eval.every_steps": Range(0, whole=True, note="0: only at the end"),
    "eval.num_examples": Range(0, whole=True, note="0: all"),
    "eval.batch_size": _WHOLE_1,
    "eval.target_mlm_accuracy": Range(0, 1, note="0 turns it off"),
    "checkpoint.every_steps": Range(0, whole=True, note="0: only at the end"),
    "checkpoint.max_to_keep": Range(0, whole=True, note="0 keeps all"),
    "mesh.data": _MESH_AXIS,
    "mesh.fsdp": _MESH_AXIS,
    "mesh.tensor": _MESH_AXIS,
    "mesh.num_devices": Range(0, whole=True, note="0: all of them"),
    "lora.rank": Range(0, whole=True, note="0: full fine-tuning"),
    "lora.alpha": _POSITIVE,
}


def range_problems(config) -> list[str]:
    """One problem per field of NUMERIC_FIELDS that `config` holds out of its range."""
    problems = []
    for path, rule in NUMERIC_FIELDS.items():
        section, name = path.split(".")
        if section in config and name in config[section]:
            value = config[section][name]
            if value in rule:
                continue
            nonfinite = isinstance(value, float) and not math.isfinite(value)
            problems.append(
                f"{path}={value!r} "
                + ("is not a finite number: it must be " if nonfinite else "must be ")
                + rule.describe()
            )
    return problems


def ask(problems: list[str], rule, *args):
    """`rule(*args)`, or None with its cli.UserError's message added to `problems`."""
    try:
        return rule(*args)
    except cli.UserError as e:
        problems.append(str(e))
        return None


def raise_problems(problems: list[str]) -> None:
    if problems:
        raise cli.UserError("config: " + "; ".join(problems))


def check_common(
    config, num_devices: int, process_count: int = 1, num_train_steps: int | None = None
) -> tuple[list[str], tuple[int, str] | None]:
    """(both trainers' problems relating fields to each other or the machine, the batch's split:
    (ways, "mesh data 8 x fsdp 1") or None); `num_train_steps`: None before counting data."""
    problems = []
    o = config.optim
    # The schedule runs in float32: a rate at or below half its smallest number (2**-149) is 0,
    # a run that trains nothing with exit 0.
    if o.learning_rate in NUMERIC_FIELDS["optim.learning_rate"] and o.learning_rate <= 2.0**-150:
        problems.append(
            f"optim.learning_rate={o.learning_rate!r} is 0 in float32, the schedule's precision: "
            "nothing would train (BERT-Base's is 1e-4)"
        )
    if o.schedule != "constant" and o.end_learning_rate > o.learning_rate:
        problems.append(
            f"optim.end_learning_rate={o.end_learning_rate!r} is above optim.learning_rate="
            f"{o.learning_rate!r}, the peak: the '{o.schedule}' decay would climb to it"
        )
    if num_train_steps is not None and o.warmup_steps > num_train_steps:
        problems.append(
            f"optim.warmup_steps={o.warmup_steps} is longer than the schedule "
            f"(train.num_train_steps={num_train_steps}); warm up over part of it"
        )
    # The model's here, not at its build: that named fine-tuning's --init config.json.
    for field, choices in (
        ("model.dtype", sorted(bert_config.DTYPES)),
        ("model.attention_impl", bert_config.ATTENTION_IMPLS),
        ("train.on_nonfinite", NONFINITE_MODES),
    ):
        section, name = field.split(".")
        if name in config[section] and config[section][name] not in choices:
            problems.append(f"{field}={config[section][name]!r}; choose one of {list(choices)}")

    m = config.mesh
    if m.num_devices > num_devices:
        problems.append(
            f"mesh.num_devices={m.num_devices}, but there are {num_devices} devices; "
            "0 uses them all"
        )
    elif m.num_devices:
        if process_count > 1:
            problems.append("mesh.num_devices is for single-process runs; set it to 0")
        num_devices = m.num_devices
    rules = ask(problems, sharding.normalize_rules, m.rules)
    sizes = ask(problems, sharding.mesh_shape, m.data, m.fsdp, m.tensor, num_devices)
    if sizes is None:
        if m.num_devices and num_devices == m.num_devices:  # "there are N" counts only those
            problems[-1] += f" (config.mesh.num_devices={m.num_devices}: 0 uses every device)"
        return problems, None
    tensor = sizes[2]
    for name in ("num_attention_heads", "intermediate_size"):
        value = config.model.get(name)
        if value is not None and value % tensor:
            problems.append(
                f"mesh.tensor={tensor} must divide model.{name}={value}: the tensor axis "
                "splits attention heads and the MLP width"
            )
    if rules is None:
        return problems, None
    axes = sharding.data_parallel_axes(dict(zip(sharding.MESH_AXES, sizes)), rules)
    split = math.prod(axes.values()), "mesh " + " x ".join(f"{a} {n}" for a, n in axes.items())
    return problems, split


def check_pretraining(config, num_devices: int, process_count: int = 1) -> None:
    """Raises every problem of a pre-training config, without reading its data."""
    raise_problems(pretraining_problems(config, num_devices, process_count))


def pretraining_problems(config, num_devices: int, process_count: int = 1) -> list[str]:
    raise_problems(range_problems(config))
    t, e, d = config.train, config.eval, config.data
    problems, split = check_common(config, num_devices, process_count, t.num_train_steps)
    if d.bad_records not in BAD_RECORD_MODES:
        problems.append(f"data.bad_records={d.bad_records!r}; choose one of {BAD_RECORD_MODES}")
    problems += splash_problems(config.model.get("attention_impl"), d.get("max_seq_length") or 0)
    if split is not None and not problems:
        dp, axes = split
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
    return problems + _batch_warmup_problems(t) + _init_problems(t)


def _batch_warmup_problems(t) -> list[str]:
    """A batch-size warmup that grows nothing or never ends."""
    steps, start, final = t.batch_warmup_steps, t.batch_warmup_start_accum, t.grad_accum_steps
    if not steps:
        return []
    problems = []
    if steps > t.num_train_steps:
        problems.append(
            f"train.batch_warmup_steps={steps} is longer than the run (train.num_train_steps="
            f"{t.num_train_steps}): the batch would never reach its full size"
        )
    if start == final:
        problems.append(
            f"train.batch_warmup_steps={steps} grows nothing: train.batch_warmup_start_accum="
            f"{start} is train.grad_accum_steps already; the batch grows from start_accum "
            "micro-batches to grad_accum_steps (raise grad_accum_steps, or set "
            "batch_warmup_steps=0)"
        )
    return problems


def splash_problems(attention_impl: str, length: int) -> list[str]:
    """attention.splash_length_problem of a forced splash kernel (0: the manifest's, later)."""
    if attention_impl != "splash" or not length:
        return []
    return [p] if (p := attention.splash_length_problem(length)) else []


def _init_problems(t) -> list[str]:
    """train.init_checkpoint is a directory of the kind init_optimizer_state needs."""
    if not t.init_checkpoint:
        if t.init_optimizer_state:
            return [
                "train.init_optimizer_state needs train.init_checkpoint: the workdir of the run "
                "to continue (e.g. phase 1's)"
            ]
        return []
    from bert_jax.training import checkpoints  # here: without one, no Orbax import

    try:
        kind = checkpoints.model_dir_kind(t.init_checkpoint)
    except cli.UserError as e:
        return [f"train.init_checkpoint: {e}"]
    if t.init_optimizer_state and kind != checkpoints.WORKDIR:
        return [
            f"train.init_optimizer_state needs a training workdir of ours, but "
            f"train.init_checkpoint={t.init_checkpoint!r} is a Hugging Face directory (no "
            "optimizer state): drop init_optimizer_state to start from its weights"
        ]
    return []


def pretraining(config, num_devices: int, process_count: int = 1):
    """bert_jax.main's one validation pass: the config's problems, the data contract's and what
    only the resolved data tells, in one cli.UserError. Returns the resolved config."""
    from bert_jax.data.contract import data_facts
    from bert_jax.data.input import pipeline  # here: they need the data's files

    problems = pretraining_problems(config, num_devices, process_count)
    import jax  # the planner compiles for a GPU from a CPU host: only the trainer asks this

    impl = config.model.get("attention_impl")
    if impl == "cudnn" and jax.default_backend() != "gpu":
        problems.append(
            f"model.attention_impl='cudnn' runs on a GPU only, and this run's devices are "
            f"{jax.default_backend()}: use 'auto' (cuDNN on a GPU, XLA's or splash elsewhere)"
        )
    try:
        resolved = data_facts.resolve(config)
        length = resolved.data.max_seq_length  # the manifest's, where the config left it 0
        problem = attention.splash_length_problem(length) if impl == "splash" else None
        if problem and problem not in problems:  # a configured length is named above already
            problems.append(problem)
        positions = resolved.model.max_position_embeddings
        if length > positions:  # found at the first step before: after the workdir and the init
            given = "" if config.data.max_seq_length else ", the manifest's"
            problems.append(
                f"the records are {length} tokens long (data.max_seq_length{given}), more than "
                f"model.max_position_embeddings={positions}: raise it to {length} or pass "
                f"records of at most {positions} tokens"
            )
        if resolved.data.nsp and not resolved.model.nsp_head:
            problems.append(
                "model.nsp_head=False, but the records are sentence pairs for NSP (data.nsp): "
                "pass MLM-only records (data_prep --nsp=false) or set model.nsp_head=True"
            )
        rate = config.data.get("masked_lm_prob")
        if rate is not None and not resolved.data.dynamic_masking:  # it did nothing, silently
            problems.append(
                f"data.masked_lm_prob={rate!r} is for dynamic masking, but these records were "
                "masked by data_prep: leave it unset, or rerun data_prep with "
                f"--masked_lm_prob={rate!r} (or --dynamic_masking, for records the trainer masks)"
            )
        if resolved.data.dynamic_masking:
            facts = data_facts.DataFacts.from_data(resolved.data)
            pipeline.masking_rule(facts, resolved.data, resolved.model.vocab_size)
    except cli.UserError as e:
        if not problems:
            raise  # the data's own error, as it is
        problems.append(str(e))
    raise_problems(problems)
    return resolved
