"""Schedules, the weight-decay mask, AdamW / LAMB steps against hand-computed numpy, and
StableAdamW against the paper's formula in numpy and optimi's (torch-optimi) implementation."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bert_jax.model import encoder
from bert_jax.training import optim
from configs import default, tiny


def optim_config(**overrides):
    cfg = default.get_config().optim
    cfg.update(overrides)
    return cfg


def schedule(cfg, num_train_steps: int):
    """step -> learning rate, as the train steps compute it."""
    return functools.partial(optim.rate, optim.schedule_values(cfg, num_train_steps))


def test_schedule_warmup_then_linear_decay_from_step_zero():
    sched = schedule(optim_config(learning_rate=1.0, warmup_steps=10), 100)
    values = {s: float(sched(s)) for s in (0, 5, 9, 10, 55, 100, 120)}
    # Warmup 0 -> peak, then the original's decay measured from step 0: 1 - step/total.
    assert values == pytest.approx({0: 0.0, 5: 0.5, 9: 0.9, 10: 0.9, 55: 0.45, 100: 0.0, 120: 0.0})


def test_schedule_polynomial_and_constant():
    poly = schedule(
        optim_config(
            learning_rate=1.0,
            warmup_steps=0,
            schedule="polynomial",
            power=2.0,
            end_learning_rate=0.1,
        ),
        100,
    )
    assert float(poly(50)) == pytest.approx(0.9 * 0.25 + 0.1)
    assert float(poly(100)) == pytest.approx(0.1)
    const = schedule(optim_config(learning_rate=2.0, warmup_steps=4, schedule="constant"), 10)
    assert [float(const(s)) for s in (2, 4, 9)] == pytest.approx([1.0, 2.0, 2.0])


def _reference_rate(schedule, decay_from, peak, end, power, warmup, total, step, **wsd):
    """The schedule in float64, written from its definition (optim.schedule_values' docstring)."""
    if step < warmup:
        return peak * step / warmup
    if schedule == "constant":
        return peak
    if schedule == "wsd":
        return _reference_wsd(peak, end, total, step, **wsd)
    origin = warmup if decay_from == "warmup_end" else 0
    frac = min(max((total - step) / max(total - origin, 1), 0.0), 1.0)
    return (peak - end) * frac ** (1.0 if schedule == "linear" else power) + end


def _reference_wsd(peak, end, total, step, decay_fraction, decay_shape):
    """After warmup, as Composer's WarmupStableDecayScheduler (ModernBERT's src/scheduler.py):
    the peak until `total - decay` steps, then the decay's share x of its steps takes the rate
    to end: 1 - x of the way (linear), or 1 - sqrt(x) (Hagele et al.'s cooldown)."""
    decay = round(decay_fraction * total)
    if step >= total:  # past the last step (decay_fraction 0 too): the end value
        return end
    if step < total - decay:
        return peak
    x = min((step - (total - decay)) / max(decay, 1), 1.0)
    left = 1 - x if decay_shape == "linear" else 1 - math.sqrt(x)
    return end + (peak - end) * left


def test_the_rate_with_traced_numbers_is_the_schedule_on_a_sweep_of_configs():
    """The train steps take the schedule's numbers as traced arguments: the rate computed from
    them equals the definition for every kind, origin and warmup, at every step of short runs."""
    rate = jax.jit(optim.rate)
    rng = np.random.default_rng(0)
    checked = 0
    for schedule in optim.SCHEDULES:
        for decay_from in optim.DECAY_FROM:
            for total, warmup in [(1, 0), (1, 1), (7, 0), (10, 3), (5, 5), (100, 10)]:
                for fraction, shape in itertools.product((0.0, 0.1, 0.35, 0.5), optim.DECAY_SHAPES):
                    if schedule != "wsd" and (fraction, shape) != (0.1, "linear"):
                        continue  # the fields are the "wsd" schedule's only
                    if schedule == "wsd" and warmup + round(fraction * total) > total:
                        continue  # refused: test_bad_settings_name_the_field
                    peak, end = float(rng.uniform(1e-5, 1e-2)), float(rng.choice([0.0, 1e-6]))
                    cfg = optim_config(
                        schedule=schedule,
                        decay_from=decay_from,
                        learning_rate=peak,
                        end_learning_rate=end,
                        power=float(rng.choice([0.5, 2.0])),
                        warmup_steps=warmup,
                        decay_fraction=fraction,
                        decay_shape=shape,
                    )
                    values = optim.schedule_values(cfg, total)
                    for step in range(total + 2):
                        want = _reference_rate(
                            schedule,
                            decay_from,
                            peak,
                            end,
                            cfg.power,
                            warmup,
                            total,
                            step,
                            decay_fraction=fraction,
                            decay_shape=shape,
                        )
                        got = float(rate(values, step))
                        assert got == pytest.approx(want, rel=2e-6, abs=1e-12), (cfg, step)
                        checked += 1
    assert checked > 1000


def test_wsd_is_a_trapezoid_and_1_sqrt_decays_later():
    """ModernBERT's shape: warmup, a long stage at the peak, the decay at the end; 1 - sqrt stays
    above linear through the decay."""
    cfg = dict(schedule="wsd", learning_rate=8e-4, warmup_steps=10, decay_fraction=0.2)
    linear = schedule(optim_config(**cfg), 100)
    sqrt = schedule(optim_config(**cfg, decay_shape="1-sqrt"), 100)
    assert float(linear(5)) == pytest.approx(4e-4)
    assert [float(linear(s)) for s in range(10, 81)] == pytest.approx([8e-4] * 71)
    assert float(linear(90)) == pytest.approx(4e-4) and float(linear(100)) == 0.0
    assert float(sqrt(90)) == pytest.approx(8e-4 * (1 - math.sqrt(0.5)))
    assert all(float(sqrt(s)) <= float(linear(s)) + 1e-9 for s in range(80, 101))


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match=r"optim.schedule"):
        schedule(optim_config(schedule="cosine"), 10)
    with pytest.raises(ValueError, match="warmup_steps"):
        schedule(optim_config(warmup_steps=20), 10)
    with pytest.raises(ValueError, match=r"optim.decay_shape"):
        schedule(optim_config(schedule="wsd", decay_shape="cosine"), 10)
    with pytest.raises(ValueError, match=r"optim.decay_fraction=1.5"):
        schedule(optim_config(schedule="wsd", decay_fraction=1.5), 10)
    with pytest.raises(ValueError, match="overlap"):
        schedule(optim_config(schedule="wsd", warmup_steps=8, decay_fraction=0.5), 10)
    lr = optim.schedule_values(optim_config(warmup_steps=1), 10)
    with pytest.raises(ValueError, match=r"optim.optimizer"):
        optim.make_optimizer(optim_config(optimizer="sgd"), lr)


def test_decay_mask_on_the_bert_parameter_tree():
    cfg = encoder.BertConfig.from_config_dict(tiny.get_config().model)
    abstract = nnx.eval_shape(lambda: encoder.BertForPreTraining(cfg, rngs=nnx.Rngs(0)))
    params = nnx.to_pure_dict(nnx.state(abstract, nnx.Param))
    mask = optim.weight_decay_mask(params)
    flat = {jax.tree_util.keystr(p): m for p, m in jax.tree_util.tree_flatten_with_path(mask)[0]}
    for path, decayed in flat.items():
        expect = path.endswith("['kernel']") or path.endswith("['embedding']")
        assert decayed == expect, path
    assert flat["['bert']['embeddings']['word_embeddings']['embedding']"]
    assert not flat["['bert']['layers'][0]['attention_norm']['scale']"]
    assert not flat["['mlm']['bias']"]  # the MLM output bias, a vocab-sized bias


PARAMS = {
    "dense": {
        "kernel": np.array([[0.5, -1.0], [2.0, 0.25]], np.float32),
        "bias": np.array([0.1, -0.2], np.float32),
    },
    "norm": {"scale": np.array([1.0, 1.5], np.float32)},
}
GRADS = [  # global norm > 1 (clipped to 1) in step 1, < 1 in step 2
    {
        "dense": {
            "kernel": np.array([[3.0, -1.0], [0.5, 2.0]], np.float32),
            "bias": np.array([1.0, 0.0], np.float32),
        },
        "norm": {"scale": np.array([-2.0, 0.5], np.float32)},
    },
    {
        "dense": {
            "kernel": np.array([[0.1, 0.2], [-0.3, 0.1]], np.float32),
            "bias": np.array([0.05, -0.1], np.float32),
        },
        "norm": {"scale": np.array([0.2, 0.0], np.float32)},
    },
]
DECAYS = {"dense/kernel"}


def _hand(lamb: bool, bias_correction: bool, lr=0.1, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, clip=1.0):
    """The original BERT optimizer (and LAMB) written out in float64 numpy."""
    flat = lambda t: {
        f"{a}/{b}": np.asarray(v, np.float64) for a, d in t.items() for b, v in d.items()
    }
    p = flat(PARAMS)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    for t, g in enumerate(GRADS, start=1):
        g = flat(g)
        norm = np.sqrt(sum((x**2).sum() for x in g.values()))
        g = {k: x * min(1.0, clip / norm) for k, x in g.items()}
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v2[k] = b2 * v2[k] + (1 - b2) * g[k] ** 2
            mh, vh = (m[k] / (1 - b1**t), v2[k] / (1 - b2**t)) if bias_correction else (m[k], v2[k])
            u = mh / (np.sqrt(vh) + eps)
            if k in DECAYS:
                u = u + wd * p[k]
                if lamb:
                    u = u * np.linalg.norm(p[k]) / np.linalg.norm(u)
            p[k] = p[k] - lr * u
    return p


def _run(cfg):
    tx = optim.make_optimizer(cfg, optim.schedule_values(cfg, num_train_steps=10))
    params = jax.tree.map(jnp.asarray, PARAMS)
    state = tx.init(params)
    for g in GRADS:
        updates, state = tx.update(jax.tree.map(jnp.asarray, g), state, params)
        params = optax.apply_updates(params, updates)
    return {f"{a}/{b}": np.asarray(v) for a, d in params.items() for b, v in d.items()}


@pytest.mark.parametrize(
    "optimizer,bias_correction", [("adamw", False), ("adamw", True), ("lamb", False)]
)
def test_two_steps_match_the_hand_computation(optimizer, bias_correction):
    cfg = optim_config(
        optimizer=optimizer,
        bias_correction=bias_correction,
        learning_rate=0.1,
        warmup_steps=0,
        schedule="constant",
    )
    got, want = _run(cfg), _hand(optimizer == "lamb", bias_correction)
    for k in want:
        # float32 1 - b2**t loses ~5e-5 relative precision: tolerances of float32 Adam, not of a
        # bug.
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)
    # Only the decayed kernel moves differently with weight decay off: the mask matters.
    no_decay = _run(optim_config(**{**cfg.to_dict(), "weight_decay": 0.0}))
    assert not np.allclose(no_decay["dense/kernel"], got["dense/kernel"])
    np.testing.assert_array_equal(no_decay["dense/bias"], got["dense/bias"])


def test_bias_correction_false_differs_from_textbook_adamw():
    # The original's choice is visible: uncorrected, the first update is (1-b1)/sqrt(1-b2) ~ 3.2x
    # the corrected one (which warmup keeps harmless).
    plain = _run(
        optim_config(bias_correction=False, learning_rate=0.1, warmup_steps=0, schedule="constant")
    )
    textbook = _run(
        optim_config(bias_correction=True, learning_rate=0.1, warmup_steps=0, schedule="constant")
    )
    step_plain = np.abs(plain["dense/bias"] - PARAMS["dense"]["bias"]).sum()
    step_textbook = np.abs(textbook["dense/bias"] - PARAMS["dense"]["bias"]).sum()
    assert step_plain > 2 * step_textbook


# StableAdamW (optim.optimizer="stable_adamw") on random tensors: kernels and embeddings decay,
# biases and LayerNorm scales do not.
STABLE_SHAPES = {
    "dense/kernel": (8, 16),
    "dense/bias": (16,),
    "norm/scale": (16,),
    "emb/embedding": (32, 8),
}
STABLE_STEPS = 20
SPIKES = (6, 12, 17)  # steps whose gradients jump 30x: the update ratio goes over 1


def _nest(flat):
    out = {}
    for key, value in flat.items():
        a, b = key.split("/")
        out.setdefault(a, {})[b] = value
    return out


def _flat(tree):
    return {f"{a}/{b}": np.asarray(v) for a, d in tree.items() for b, v in d.items()}


def _stable_case(seed=0, grad_scale=1.0):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in STABLE_SHAPES.items()}
    grads = []
    for step in range(STABLE_STEPS):
        jump = 30.0 if step in SPIKES else 1.0
        grads.append(
            {
                k: (grad_scale * jump * rng.normal(size=s)).astype(np.float32)
                for k, s in STABLE_SHAPES.items()
            }
        )
    return params, grads


def _stable_config(**overrides):
    cfg = optim_config(
        optimizer="stable_adamw",
        learning_rate=1e-2,
        warmup_steps=5,
        schedule="linear",
        decay_from="warmup_end",
        b1=0.9,
        b2=0.98,
        eps=1e-6,
        bias_correction=True,
        weight_decay=0.1,
        max_grad_norm=0.0,
    )
    cfg.update(overrides)
    return cfg


def _rates(cfg):
    return [float(r) for r in map(schedule(cfg, STABLE_STEPS), range(STABLE_STEPS))]


def _run_tx(tx, params, grads):
    params = jax.tree.map(jnp.asarray, _nest(params))
    state = tx.init(params)
    for g in grads:
        updates, state = tx.update(jax.tree.map(jnp.asarray, _nest(g)), state, params)
        params = optax.apply_updates(params, updates)
    return _flat(params)


def _stable_adamw_numpy(params, grads, rates, b1, b2, eps, weight_decay):
    """The paper's StableAdamW (Wortsman et al. 2023, Algorithm 2, with optimi's decoupled decay)
    in float64: Adam's bias-corrected moments; RMS = sqrt(mean(g^2 / max(v_hat, eps^2))) per
    tensor; eta = lr / max(1, RMS); w <- w - eta * (m_hat / (sqrt(v_hat) + eps) + wd * w), the
    decay only on kernels and embeddings. Returns the parameters and how many (step, tensor)
    updates were clipped."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    clipped = 0
    for t, (g, lr) in enumerate(zip(grads, rates), start=1):
        for k in p:
            gk = g[k].astype(np.float64)
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk**2
            m_hat, v_hat = m[k] / (1 - b1**t), v[k] / (1 - b2**t)
            rms = np.sqrt(np.mean(gk**2 / np.maximum(v_hat, eps**2)))
            clipped += rms > 1
            eta = lr / max(1.0, rms)
            decay = weight_decay * p[k] if k.endswith(("kernel", "embedding")) else 0.0
            p[k] = p[k] - eta * (m_hat / (np.sqrt(v_hat) + eps) + decay)
    return p, clipped


def test_stable_adamw_matches_the_papers_formula_in_numpy():
    cfg = _stable_config()
    params, grads = _stable_case()
    got = _run_tx(
        optim.make_optimizer(cfg, optim.schedule_values(cfg, STABLE_STEPS)), params, grads
    )
    want, clipped = _stable_adamw_numpy(
        params, grads, _rates(cfg), cfg.b1, cfg.b2, cfg.eps, cfg.weight_decay
    )
    assert clipped >= len(SPIKES) * len(STABLE_SHAPES) // 2  # the clipping is exercised
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6, err_msg=k)
    # and it is not AdamW: the spikes' updates were shrunk
    adamw = _run_tx(
        optim.make_optimizer(
            _stable_config(optimizer="adamw"), optim.schedule_values(cfg, STABLE_STEPS)
        ),
        params,
        grads,
    )
    assert max(np.abs(adamw[k] - want[k]).max() for k in want) > 1e-3


# optimi warns that decay 1e-3 is high for decouple_lr: the comparison wants it visible.
@pytest.mark.filterwarnings("ignore:You are using weight_decay")
def test_stable_adamw_matches_optimi():
    """optimi's StableAdamW (torch-optimi, what ModernBERT's decoupled_stableadamw runs) with
    decouple_lr=True: its decay is (lr_t / max_lr) x wd, ours lr_t x wd / peak."""
    torch = pytest.importorskip("torch")
    optimi = pytest.importorskip("optimi")
    cfg = _stable_config()
    params, grads = _stable_case(seed=1)
    got = _run_tx(
        optim.make_optimizer(cfg, optim.schedule_values(cfg, STABLE_STEPS)), params, grads
    )
    tensors = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    decayed = [t for k, t in tensors.items() if k.endswith(("kernel", "embedding"))]
    rest = [t for k, t in tensors.items() if not k.endswith(("kernel", "embedding"))]
    peak = cfg.learning_rate
    opt = optimi.StableAdamW(
        [
            {"params": decayed, "weight_decay": cfg.weight_decay * peak},
            {"params": rest, "weight_decay": 0.0},
        ],
        lr=peak,
        betas=(cfg.b1, cfg.b2),
        eps=cfg.eps,
        decouple_lr=True,
        max_lr=peak,
        kahan_sum=False,
        foreach=False,
        triton=False,
    )
    for g, lr in zip(grads, _rates(cfg)):
        for group in opt.param_groups:
            group["lr"] = lr
        for k, t in tensors.items():
            t.grad = torch.tensor(g[k])
        opt.step()
    for k, t in tensors.items():
        np.testing.assert_allclose(got[k], t.detach().numpy(), rtol=2e-5, atol=2e-6, err_msg=k)


def test_stable_adamw_with_small_update_ratios_is_optax_adamw_exactly():
    # Gradients far below eps: g^2 / max(v_hat, eps^2) <= (4e-4 / 1e-2)^2, never clipped.
    cfg = _stable_config(eps=1e-2)
    params, grads = _stable_case(seed=2, grad_scale=1e-4)
    values = optim.schedule_values(cfg, STABLE_STEPS)
    got = _run_tx(optim.make_optimizer(cfg, values), params, grads)
    adamw = optax.adamw(
        functools.partial(optim.rate, values),
        b1=cfg.b1,
        b2=cfg.b2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=optim.weight_decay_mask,
    )
    want = _run_tx(adamw, params, grads)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_stable_adamw_asks_for_bias_correction():
    cfg = _stable_config(bias_correction=False)
    with pytest.raises(ValueError, match="bias_correction=True"):
        optim.make_optimizer(cfg, optim.schedule_values(cfg, STABLE_STEPS))
