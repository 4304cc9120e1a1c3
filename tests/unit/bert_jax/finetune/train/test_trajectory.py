"""Fine-tuning follows transformers' trajectory step for step, for every task head.

Both sides start from the same weights (the task head's included: transformers loads our export
of the untrained model), see the same batches in the same order with dropout off, and train with
the same optimizer and schedule: ours is the fine-tuning train step with configs/finetune/base.py's
optimizer settings; theirs is torch.optim.AdamW with transformers' convention of no weight decay
on biases and LayerNorm weights, transformers.get_linear_schedule_with_warmup and
clip_grad_norm_(1.0), the loop of run_glue_no_trainer.py. Per-step losses and the final
parameters (ours mapped to transformers' names by the export) must agree to float32 rounding.

The negative tests show the comparison has teeth: weight decay on LayerNorm scales, or a schedule
one step ahead, moves the final parameters far outside the tolerance. (So would the original
BERT's uncorrected Adam moments, about 3x larger first updates, or its decay measured from step
0; test_the_defaults_are_transformers_not_pretrainings pins those fields.)
"""

import functools

import numpy as np
import pytest
from flax import nnx

from bert_jax.data.input import packing
from bert_jax.finetune import encode, heads, packed, runs, squad, train
from bert_jax.model import encoder, sharding
from bert_jax.training import optim
from configs.finetune import base
from support import tiny

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = encoder.BertConfig(
    vocab_size=60,
    **tiny.SHAPE,  # configs/tiny.py's
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=32,
    type_vocab_size=2,
    initializer_range=0.02,
)
STEPS, WARMUP, BATCH, LENGTH, LR = 6, 2, 8, 16, 1e-3
# Ten times the default weight decay, on both sides: decay wrongly applied to LayerNorm scales
# (about 1) then moves them by 0.1 x the summed learning rate, 3e-4, far outside PARAM_TOL.
WEIGHT_DECAY = 0.1
# Float32 rounding, amplified a little by six Adam steps (measured: 1.2e-7 and 2.6e-7).
LOSS_TOL, PARAM_TOL = 1e-5, 2e-6
# kind -> (number of labels, transformers class, pair input)
HEADS = {
    "classification": (3, "AutoModelForSequenceClassification", False),
    "pair": (3, "AutoModelForSequenceClassification", True),
    "regression": (1, "AutoModelForSequenceClassification", True),
    "tagging": (5, "AutoModelForTokenClassification", False),
    "span": (0, "AutoModelForQuestionAnswering", True),
}


def config():
    config = base.get_config()
    config.model.hidden_dropout_prob = config.model.attention_probs_dropout_prob = 0.0
    config.optim.learning_rate = LR
    config.optim.warmup_steps = WARMUP
    config.optim.weight_decay = WEIGHT_DECAY
    config.mesh.num_devices = 1
    return config


def batches(head: str, short: bool = False) -> list[dict]:
    """STEPS batches of random inputs and labels, some rows padded (`short`: every row at most
    half full, so that rows can be packed)."""
    rng = np.random.default_rng(0)
    num_labels, _, pair = HEADS[head]
    out = []
    for _ in range(STEPS):
        low, high = (3, LENGTH // 2) if short else (LENGTH // 2, LENGTH)
        lengths = rng.integers(low, high + 1, BATCH)
        mask = (np.arange(LENGTH)[None] < lengths[:, None]).astype(np.int32)
        b = {
            "input_ids": (rng.integers(5, TINY.vocab_size, (BATCH, LENGTH)) * mask).astype(
                np.int32
            ),
            "input_mask": mask,
            "segment_ids": (
                (np.arange(LENGTH)[None] >= lengths[:, None] // 2) * mask * pair
            ).astype(np.int32),
        }
        if head in ("classification", "pair"):
            b[encode.LABEL] = rng.integers(0, num_labels, BATCH).astype(np.int32)
        elif head == "regression":
            b[encode.LABEL] = rng.uniform(0, 5, BATCH).astype(np.float32)
        elif head == "tagging":
            b[encode.LABEL_IDS] = rng.integers(0, num_labels, (BATCH, LENGTH)).astype(np.int32)
            # Only first pieces of words count: drop some positions, and all padding.
            b[encode.LABEL_WEIGHTS] = (mask * (rng.random((BATCH, LENGTH)) < 0.7)).astype(
                np.float32
            )
        else:
            start = rng.integers(1, lengths)
            b[squad.START_POSITIONS] = start.astype(np.int32)
            b[squad.END_POSITIONS] = np.minimum(start + rng.integers(0, 3, BATCH), lengths - 1)
            b[squad.END_POSITIONS] = b[squad.END_POSITIONS].astype(np.int32)
        out.append(b)
    return out


def initial_model(head: str) -> heads.TaskModel:
    num_labels, _, _ = HEADS[head]
    kind = {"pair": "classification"}.get(head, head)
    return heads.TaskModel(TINY, kind, max(num_labels, 2), rngs=nnx.Rngs(0))


def labels_of(head):
    return tuple(f"c{i}" for i in range(HEADS[head][0])) if head != "regression" else ()


def packed_batches(head: str) -> list[dict]:
    """batches(head, short=True), each packed (finetune/packed.py) into as many rows as the
    fullest needs."""
    plans = [
        packing.first_fit_decreasing(packed.lengths(b), LENGTH, max_examples=4)
        for b in batches(head, short=True)
    ]
    rows = max(len(p) for p in plans)
    assert rows <= BATCH // 2  # two or more examples a row
    return [
        packed.pack_examples(b, np.arange(BATCH), 4, rows, plan).arrays
        for b, plan in zip(batches(head, short=True), plans)
    ]


def ours(head: str, config, pack: bool = False) -> tuple[list[float], dict]:
    """Our train step, STEPS times -> (losses, final parameters under transformers' names)."""
    model = initial_model(head)
    setup, trainable, frozen = runs.make_setup(config, model, STEPS)
    state = runs.initial_state(setup, trainable, seed=0)
    step_fn = train.jit_train_step(setup)
    losses = []
    with setup.activate():
        for b in packed_batches(head) if pack else batches(head):
            state, metrics = step_fn(
                state, frozen, sharding.host_to_global(b, setup.batch_sharding), setup.lr
            )
            losses.append(float(metrics["loss"]))
    return losses, heads.hf_tensors(runs.host_model(setup, state["params"], frozen))


@functools.cache
def theirs(head: str, export_root: str, short: bool = False) -> tuple[tuple[float, ...], dict]:
    """transformers' model from our export of the same initial model, trained as its users do
    on batches(head, short)."""
    path = f"{export_root}/{head}{'_short' if short else ''}"
    heads.export_hf(initial_model(head), labels_of(head), path, None)
    _, auto_class, _ = HEADS[head]
    model = getattr(transformers, auto_class).from_pretrained(path, attn_implementation="eager")
    model.train()
    no_decay = ("bias", "LayerNorm.weight")
    named = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [
            {
                "params": [p for n, p in named if not n.endswith(no_decay)],
                "weight_decay": WEIGHT_DECAY,
            },
            {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0},
        ],
        lr=LR,
    )
    schedule = transformers.get_linear_schedule_with_warmup(opt, WARMUP, STEPS)
    losses = []
    for b in batches(head, short):
        t = {k: torch.from_numpy(np.asarray(v)) for k, v in b.items()}
        inputs = {
            "input_ids": t["input_ids"].long(),
            "attention_mask": t["input_mask"].long(),
            "token_type_ids": t["segment_ids"].long(),
        }
        if head == "tagging":
            inputs["labels"] = torch.where(
                t[encode.LABEL_WEIGHTS] > 0, t[encode.LABEL_IDS].long(), -100
            )
        elif head == "span":
            inputs["start_positions"] = t[squad.START_POSITIONS].long()
            inputs["end_positions"] = t[squad.END_POSITIONS].long()
        else:
            label = t[encode.LABEL]
            inputs["labels"] = label if head == "regression" else label.long()
        loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    params = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return tuple(losses), params


def untrained(head: str) -> set[str]:
    """Parameters whose gradient is zero in exact arithmetic, so that both sides train them on
    rounding noise, which Adam scales up to the size of the learning rate. For span that is the
    output bias and the last LayerNorm's bias: each adds the same value to every position's start
    (and end) logit, which the softmax over positions ignores. They cannot change the loss, so
    the per-step losses cover them; the final-parameter comparison leaves them out."""
    if head != "span":
        return set()
    return {
        "qa_outputs.bias",
        f"bert.encoder.layer.{TINY.num_hidden_layers - 1}.output.LayerNorm.bias",
    }


def differences(head, config, export_root, pack=False) -> tuple[float, float, str]:
    """(largest loss difference over the steps, largest final parameter difference, and the
    parameter it is in)."""
    our_losses, our_params = ours(head, config, pack)
    their_losses, their_params = theirs(head, export_root, short=pack)
    assert set(our_params) <= set(their_params), set(our_params) - set(their_params)
    loss_diff = float(np.max(np.abs(np.subtract(our_losses, their_losses))))
    param_diffs = {
        k: float(np.max(np.abs(v - their_params[k])))
        for k, v in our_params.items()
        if k not in untrained(head)
    }
    worst = max(param_diffs, key=param_diffs.get)
    return loss_diff, param_diffs[worst], worst


@pytest.fixture(scope="module")
def export_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("trajectory"))


@pytest.mark.parametrize("head", list(HEADS))
def test_fine_tuning_follows_transformers_step_for_step(head, export_root):
    loss_diff, param_diff, worst = differences(head, config(), export_root)
    print(f"{head}: loss {loss_diff:.2e}, parameters {param_diff:.2e} ({worst})")
    assert loss_diff < LOSS_TOL and param_diff < PARAM_TOL, (loss_diff, param_diff, worst)


@pytest.mark.parametrize("head", [h for h in HEADS if h != "span"])
def test_packed_fine_tuning_follows_transformers_step_for_step(head, export_root):
    """The same examples packed several to a row (finetune/packed.py; transformers pads each):
    the same trajectory. (Span rows are never packed in training: transformers' span loss takes
    its softmax over padding, which packed rows have none of.)"""
    loss_diff, param_diff, worst = differences(head, config(), export_root, pack=True)
    print(f"{head} packed: loss {loss_diff:.2e}, parameters {param_diff:.2e} ({worst})")
    assert loss_diff < LOSS_TOL and param_diff < PARAM_TOL, (loss_diff, param_diff, worst)


def _decay_layernorm_too(path) -> bool:
    return bool(path) and str(path[-1]) in ("kernel", "embedding", "scale")


def _schedule_one_step_ahead(original):
    return lambda values, step: original(values, step + 1)


@pytest.mark.parametrize("perturbation", ["layernorm_decay", "schedule_off_by_one"])
def test_a_perturbed_optimizer_is_caught(perturbation, export_root, monkeypatch):
    if perturbation == "layernorm_decay":
        monkeypatch.setattr(optim, "decays", _decay_layernorm_too)
    else:
        monkeypatch.setattr(optim, "rate", _schedule_one_step_ahead(optim.rate))
    loss_diff, param_diff, worst = differences("classification", config(), export_root)
    print(f"{perturbation}: loss {loss_diff:.2e}, parameters {param_diff:.2e} ({worst})")
    assert param_diff > 20 * PARAM_TOL


def test_the_defaults_are_transformers_not_pretrainings():
    """configs/finetune/base.py is what the trajectory test trains with; pre-training keeps the
    original BERT optimizer (configs/default.py)."""
    from configs import default

    ft, pre = base.get_config().optim, default.get_config().optim
    assert (ft.bias_correction, ft.eps, ft.decay_from) == (True, 1e-8, "warmup_end")
    assert (pre.bias_correction, pre.eps, pre.decay_from) == (False, 1e-6, "start")


@pytest.mark.parametrize("total, warmup", [(10, 3), (7, 0), (5, 5)])
def test_decay_from_warmup_end_is_transformers_schedule(total, warmup):
    cfg = base.get_config().optim
    cfg.update(learning_rate=1.0, warmup_steps=warmup)
    ours_ = functools.partial(optim.rate, optim.schedule_values(cfg, total))
    lam = transformers.get_linear_schedule_with_warmup(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), warmup, total
    ).lr_lambdas[0]
    for step in range(total + 2):
        assert float(ours_(step)) == pytest.approx(lam(step), abs=1e-7), step
    cfg.decay_from = "start"  # the original: the decay runs from step 0, the peak never reached
    start = functools.partial(optim.rate, optim.schedule_values(cfg, total))
    if warmup:
        assert float(start(warmup)) == pytest.approx(1 - warmup / total)


def test_the_tokenizers_pad_row_is_frozen_not_row_0():
    """A vocabulary whose [PAD] is not id 0 (ModernBERT's tokenizer.json: 50,283; a BPE with
    <s> first): the span step zeroed row 0's gradient (a real token, trained by transformers)
    and trained the padding row (which transformers' padding_idx freezes). Now the tokenizer's
    pad row is the frozen one."""
    pad = 7
    cfg = config()
    cfg.optim.weight_decay = 0.0
    model = initial_model("span")
    setup, trainable, frozen = runs.make_setup(cfg, model, STEPS)
    state = runs.initial_state(setup, trainable, seed=0)
    step_fn = train.jit_train_step(setup, pad_id=pad)
    b = batches("span")[0]
    real = b["input_mask"].astype(bool)
    b["input_ids"] = np.where(real, b["input_ids"], pad).astype(np.int32)
    b["input_ids"][:, 1] = 0  # id 0 as a real token of every row
    before = np.asarray(trainable["bert"]["embeddings"]["word_embeddings"]["embedding"]).copy()
    with setup.activate():
        for _ in range(3):  # past the warmup's zero rate
            state, _ = step_fn(
                state, frozen, sharding.host_to_global(b, setup.batch_sharding), setup.lr
            )
    after = np.asarray(state["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"])
    np.testing.assert_array_equal(after[pad], before[pad])
    assert np.abs(after[0] - before[0]).max() > 1e-5
