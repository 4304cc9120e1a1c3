"""Pre-training a ModernBERT-block model follows transformers' ModernBertForMaskedLM step for step.

Both sides start from the same weights (transformers loads ours through bert_jax.hf.bert), see the
same MLM-only batches (some rows padded, rows longer than the sliding window) with dropout off, and
train 100 steps with the same AdamW: ours is bert_jax.training.pretrain's jitted train step with
configs/modernbert_base.py's block on a tiny shape; theirs torch.optim.AdamW (no weight decay on
LayerNorm weights and biases, as ours), clip_grad_norm_(1.0) and our learning rate set before each
step. Losses agree within 1e-4 at every step; a wrong window or RoPE base is caught.
"""

import jax
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.hf import bert
from bert_jax.model import sharding
from bert_jax.model.encoder import BertConfig
from bert_jax.training import optim, pretrain
from configs import modernbert_base

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

STEPS, BATCH, LENGTH, PREDICTIONS, VOCAB, PERIOD, MASK_ID = 100, 8, 24, 4, 64, 6, 2
LOSS_TOL = 1e-4


def config():
    config = modernbert_base.get_config()
    m = config.model
    m.update(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=4,  # global, sliding, sliding, global
        num_attention_heads=2,
        intermediate_size=48,
        local_attention=8,  # 4 either side, in 24-token rows
        max_position_embeddings=64,
        global_rope_theta=160_000.0,  # the block's (stage 1 trains both at 10,000)
    )
    config.data.update(max_seq_length=LENGTH, max_predictions_per_seq=PREDICTIONS)
    config.data.dynamic_masking = False  # the batches below carry their masks
    o = config.optim
    o.update(learning_rate=3e-3, warmup_steps=10, b1=0.9, b2=0.98, eps=1e-6)
    o.update(bias_correction=True, weight_decay=0.01, max_grad_norm=1.0)
    o.optimizer = "adamw"  # torch.optim.AdamW's (the config's StableAdamW: test_optim.py)
    config.train.num_train_steps = STEPS
    config.train.global_batch_size = BATCH
    config.mesh.num_devices = 1
    return config


def batches() -> list[dict]:
    """STEPS batches; rows 6 and 7 padded; PREDICTIONS distinct positions a row replaced by
    [MASK] (id 2). Each row repeats PERIOD random ids, so a masked id can be read PERIOD
    positions away: training has something to learn, through attention, and a sliding window
    of 4 either side cannot see it where a global layer or a wider window can."""
    rng = np.random.default_rng(0)
    out = []
    lengths = np.array([LENGTH] * 6 + [17, 9])
    mask = (np.arange(LENGTH)[None] < lengths[:, None]).astype(np.int32)
    for _ in range(STEPS):
        pattern = rng.integers(3, VOCAB, (BATCH, PERIOD))
        ids = (np.tile(pattern, LENGTH // PERIOD + 1)[:, :LENGTH] * mask).astype(np.int32)
        positions = np.sort(
            np.stack([rng.choice(n, PREDICTIONS, replace=False) for n in lengths]), axis=1
        ).astype(np.int32)
        masked = ids.copy()
        np.put_along_axis(masked, positions, MASK_ID, axis=1)
        out.append(
            {
                F.INPUT_IDS: masked,
                F.INPUT_MASK: mask,
                F.SEGMENT_IDS: np.zeros_like(ids),
                F.MASKED_LM_POSITIONS: positions,
                F.MASKED_LM_IDS: np.take_along_axis(ids, positions, axis=1),
                F.MASKED_LM_WEIGHTS: np.ones((BATCH, PREDICTIONS), np.float32),
                F.NEXT_SENTENCE_LABELS: np.zeros(BATCH, np.int32),
            }
        )
    return out


def ours(cfg) -> tuple[list[float], dict, dict]:
    """(losses, initial parameters, final parameters) of our train step over batches()."""
    setup = pretrain.make_setup(cfg)
    step_fn = pretrain.jit_train_step(setup)
    losses = []
    with setup.activate():
        state = pretrain.jit_init(setup, 0)()
        initial = jax.device_get(state["params"])
        for b in batches():
            state, metrics = step_fn(
                state, sharding.host_to_global(b, setup.batch_sharding), setup.lr
            )
            losses.append(float(metrics["loss"]))
        final = jax.device_get(state["params"])
    return losses, initial, final


def theirs(cfg, params, steps=STEPS, **hf_changes) -> list[float]:
    """transformers' losses over the first `steps` of batches(), from `params`."""
    model_config = BertConfig.from_config_dict(cfg.model)
    hf_config = {**bert.hf_config_from_bert(model_config), **hf_changes}
    model = transformers.ModernBertForMaskedLM(
        transformers.ModernBertConfig(**hf_config, attn_implementation="eager")
    )
    state = {k: torch.tensor(v) for k, v in bert.to_hf_state_dict(params, model_config).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and missing == ["decoder.weight"], (missing, unexpected)  # tied
    model.train()
    named = list(model.named_parameters())
    no_decay = [p for n, p in named if n.endswith(("norm.weight", "bias"))]
    decay = [p for n, p in named if not n.endswith(("norm.weight", "bias"))]
    o = cfg.optim
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": o.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=o.learning_rate,
        betas=(o.b1, o.b2),
        eps=o.eps,
    )
    lr = optim.schedule_values(o, cfg.train.num_train_steps)
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster, and leaves a core to others
    for step, b in enumerate(batches()[:steps]):
        for group in opt.param_groups:
            group["lr"] = float(optim.rate(lr, step))
        labels = np.full(b[F.INPUT_IDS].shape, -100, np.int64)
        np.put_along_axis(labels, b[F.MASKED_LM_POSITIONS], b[F.MASKED_LM_IDS], axis=1)
        loss = model(
            input_ids=torch.from_numpy(b[F.INPUT_IDS].astype(np.int64)),
            attention_mask=torch.from_numpy(b[F.INPUT_MASK].astype(np.int64)),
            labels=torch.from_numpy(labels),
        ).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.max_grad_norm)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    torch.set_num_threads(threads)
    return losses


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    cfg = config()
    return cfg, *ours(cfg)


def test_pretraining_follows_transformers_modernbert_step_for_step(trained):
    cfg, our_losses, initial, final = trained
    their_losses = theirs(cfg, initial)
    diff = np.abs(np.subtract(our_losses, their_losses))
    print(f"largest loss difference over {STEPS} steps: {diff.max():.2e} (step {diff.argmax()})")
    assert diff.max() < LOSS_TOL, diff.max()
    # The weights went far from where they started (initialized with stddev 0.02 or less), so
    # the agreement is not that of two models standing still.
    moved = max(float(np.abs(a - b).max()) for a, b in zip(*map(jax.tree.leaves, (final, initial))))
    assert moved > 0.1, moved


@pytest.mark.parametrize(
    "change",
    [
        {"local_attention": 16},  # 8 either side instead of 4
        {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10_000.0}}},
    ],
    ids=["window", "rope_theta"],
)
def test_a_different_model_is_caught(trained, change):
    """The comparison has teeth: transformers with a wider window, or RoPE's global base at the
    local one's, leaves the tolerance far behind (the base shows once the attention has
    sharpened: at initialization attention is nearly uniform, whatever the rotation)."""
    cfg, our_losses, initial, _ = trained
    if "rope_parameters" in change:
        written = bert.hf_config_from_bert(BertConfig.from_config_dict(cfg.model))
        change["rope_parameters"] = {**written["rope_parameters"], **change["rope_parameters"]}
    diff = np.abs(np.subtract(our_losses, theirs(cfg, initial, **change)))
    print(f"{change}: largest loss difference {diff.max():.2e}")
    assert diff.max() > 10 * LOSS_TOL, diff.max()


def test_a_vocab_size_left_to_the_data_is_refused_before_any_array():
    """config.model.vocab_size=0 means "the data's": a run's data_facts.resolve fills it in or
    refuses it (test_data_facts); a library caller that builds a setup without resolving meets
    the model config's own check, naming the field."""
    cfg = config()
    cfg.model.vocab_size = 0
    with pytest.raises(cli.UserError, match="vocab_size must be a positive integer, got 0"):
        pretrain.make_setup(cfg)
