"""The modern recipe's configs: ModernBERT-base's numbers, and its two stages as one schedule (the
1,024-token stage at the peak, the 8,192-token stage at 3e-4 then a 1 - sqrt decay to 0, the
global RoPE theta raised from 10,000 to 160,000)."""

import math

import pytest

from bert_jax.data.contract import data_facts
from bert_jax.model import encoder
from bert_jax.training import optim
from configs import default, modern, modernbert_base, modernbert_base_8192, modernbert_large


def rate(config, step) -> float:
    values = optim.schedule_values(config.optim, config.train.num_train_steps)
    return float(optim.rate(values, step))


def test_the_recipe_is_modernberts_and_runs_on_the_bert_model():
    config = modern.get_config()
    d, o, t = config.data, config.optim, config.train
    assert (d.nsp, d.dynamic_masking, d.pack) == (False, True, True)
    assert (d.masked_lm_prob, d.eval_masked_lm_prob) == (0.3, 0.15)
    assert (o.learning_rate, o.b1, o.b2, o.eps, o.max_grad_norm) == (8e-4, 0.9, 0.98, 1e-6, 0.0)
    # The yaml's decoupled_stableadamw, in every ModernBERT config; it builds.
    for module in (modern, modernbert_base, modernbert_base_8192, modernbert_large):
        one = module.get_config()
        assert (one.optim.optimizer, one.optim.bias_correction) == ("stable_adamw", True)
        optim.make_optimizer(one.optim, optim.schedule_values(one.optim, one.train.num_train_steps))
    # Fully decoupled weight decay 1e-5: lr_t x weight_decay = (lr_t / peak) x 1e-5.
    assert o.learning_rate * o.weight_decay == pytest.approx(1e-5)
    assert t.global_batch_size == 4608 and t.global_batch_size // t.grad_accum_steps == 96
    warmup = optim.batch_warmup(t)
    assert warmup.count(0) * 96 == 768 and warmup.count(warmup.steps) * 96 == 4608
    # ~1.719T tokens, the batch warmup's smaller steps included.
    tokens = (
        sum(warmup.count(s) * 96 * d.max_seq_length for s in range(0, warmup.steps, 10)) * 10
        + (t.num_train_steps - warmup.steps) * 4608 * d.max_seq_length
    )
    assert tokens == pytest.approx(1.719e12, rel=0.01)
    config.model.vocab_size = 50368
    encoder.BertConfig.from_config_dict(config.model)  # today's model takes the recipe
    data_facts.DataFacts.from_data(d)
    # Room for 30% of a packed row's tokens and each of its records' rounding.
    assert d.max_predictions_per_seq >= math.ceil(0.3 * d.max_seq_length) + d.pack_max_examples


def test_the_two_stages_are_one_warmup_stable_decay_schedule():
    one, two = modernbert_base.get_config(), modernbert_base_8192.get_config()
    end = one.train.num_train_steps
    assert one.optim.warmup_steps < end and rate(one, end - 1) == pytest.approx(8e-4)
    assert [rate(one, s) for s in (one.optim.warmup_steps, end // 2)] == pytest.approx([8e-4] * 2)
    assert two.train.init_optimizer_state and two.train.batch_warmup_steps == 0
    total = two.train.num_train_steps
    decay = round(two.optim.decay_fraction * total)
    assert decay == modernbert_base_8192.DECAY_STEPS and total - end == modernbert_base_8192.STEPS
    assert rate(two, end) == pytest.approx(3e-4) and rate(two, total - decay) == pytest.approx(3e-4)
    halfway = total - decay // 2
    assert rate(two, halfway) == pytest.approx(3e-4 * (1 - math.sqrt(0.5)), rel=1e-3)
    assert rate(two, total) == 0.0
    # 8,192-token rows, the same tokens a step; 50B of the 300B tokens decaying.
    rows = two.train.global_batch_size
    assert two.data.max_seq_length == 8192 and rows * 8192 == 4608 * 1024
    assert decay * rows * 8192 == pytest.approx(50e9, rel=1e-3)
    assert two.optim.learning_rate * two.optim.weight_decay == pytest.approx(1e-5)


def test_the_rope_theta_fields_are_the_ones_the_model_reads():
    one, two = modernbert_base.get_config(), modernbert_base_8192.get_config()
    assert (one.model.global_rope_theta, one.model.local_rope_theta) == (10_000.0, 10_000.0)
    assert (two.model.global_rope_theta, two.model.local_rope_theta) == (160_000.0, 10_000.0)
    # BERT's config keeps absolute positions: the thetas are there but unused.
    assert default.get_config().model.position_embedding_type == "absolute"
    for config in (one, two):
        built = encoder.BertConfig.from_config_dict(config.model)
        assert (built.global_rope_theta, built.position_embedding_type) == (
            config.model.global_rope_theta,
            "rope",
        )
