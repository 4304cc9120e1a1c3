"""The shared train state's Setup: the learning-rate schedule is an argument of the train steps,
so runs that differ only in their rate, warmup or step count run one compiled step."""

import jax
import pytest
from flax import nnx

from bert_jax.data.contract import data_facts
from bert_jax.finetune import encode, heads, runs
from bert_jax.finetune import train as ft_train
from bert_jax.model import encoder
from bert_jax.training import pretrain
from configs import tiny
from configs.finetune import base as ft_base

SCHEDULES = [
    dict(num_train_steps=10, learning_rate=1e-4, warmup_steps=1, schedule="linear"),
    dict(num_train_steps=300, learning_rate=5e-3, warmup_steps=30, schedule="linear"),
    dict(num_train_steps=7, learning_rate=2e-5, warmup_steps=0, schedule="constant"),
    dict(num_train_steps=50, learning_rate=1e-3, warmup_steps=50, schedule="polynomial"),
    # Warmup-stable-decay (ModernBERT's trapezoid), linear or 1-sqrt: the same program.
    dict(num_train_steps=40, learning_rate=8e-4, warmup_steps=4, schedule="wsd"),
    dict(
        num_train_steps=90,
        learning_rate=8e-4,
        warmup_steps=9,
        schedule="wsd",
        decay_fraction=0.0,
        decay_shape="1-sqrt",
    ),
]


def _pretraining_hlo(num_train_steps, **optim) -> str:
    config = tiny.get_config()
    config.model.vocab_size = 64
    config.train.num_train_steps = num_train_steps
    config.optim.update(optim)
    d = config.data
    d.max_seq_length, d.max_predictions_per_seq, d.dynamic_masking = 16, 3, False
    setup = pretrain.make_setup(config, devices=jax.devices()[:2])
    batch = pretrain.abstract_batch(data_facts.DataFacts.from_data(d), 4, setup)
    with setup.activate():
        lowered = pretrain.jit_train_step(setup).lower(
            setup.abstract_state, batch, setup.abstract_lr()
        )
    return lowered.as_text(debug_info=False)


def _finetuning_hlo(num_train_steps, **optim) -> str:
    config = ft_base.get_config()
    config.optim.update(optim)
    config.optim.warmup_proportion = 0.0
    model_config = tiny.get_config().model
    model_config.vocab_size = 64
    model = nnx.eval_shape(
        lambda: heads.TaskModel(
            encoder.BertConfig.from_config_dict(model_config),
            "classification",
            2,
            rngs=nnx.Rngs(0),
        )
    )
    setup, _, frozen = runs.make_setup(
        config, model, num_train_steps, jax.devices()[:1], place=False
    )
    batch = {k: jax.ShapeDtypeStruct((4, 16), "int32") for k in runs.INPUTS}
    batch[encode.LABEL] = jax.ShapeDtypeStruct((4,), "int32")
    frozen = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), frozen)
    with setup.activate():
        lowered = ft_train.jit_train_step(setup).lower(
            setup.abstract_state, frozen, batch, setup.abstract_lr()
        )
    return lowered.as_text(debug_info=False)


@pytest.mark.parametrize(
    "hlo", [_pretraining_hlo, _finetuning_hlo], ids=["pretraining", "finetuning"]
)
def test_runs_that_differ_only_in_their_schedule_share_one_train_step(hlo):
    """Before, the rate, warmup and step count were constants of the program: every test (and a
    user's rerun with another step count) compiled its own train step. The kind of schedule and
    warmup-stable-decay's decay fraction and shape are numbers of the step too."""
    programs = {hlo(**s) for s in SCHEDULES}
    assert len(programs) == 1
    # What does change the program still does.
    assert hlo(**SCHEDULES[0], b1=0.8) not in programs
