"""The two transformers classes as data: the names a checkpoint may spell, and a mixed block."""

import dataclasses

import pytest

from bert_jax import cli
from bert_jax.hf import architectures
from bert_jax.hf.architectures import BERT, MODERNBERT
from bert_jax.model.bert_config import BertConfig
from support import tiny


@pytest.mark.parametrize(
    ("arch", "name", "normal"),
    [
        # A bare encoder's names get the pre-training model's prefix.
        (BERT, "embeddings.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"),
        (BERT, "encoder.layer.0.output.dense.bias", "bert.encoder.layer.0.output.dense.bias"),
        (BERT, "pooler.dense.weight", "bert.pooler.dense.weight"),
        (MODERNBERT, "layers.1.attn.Wqkv.weight", "model.layers.1.attn.Wqkv.weight"),
        (MODERNBERT, "final_norm.weight", "model.final_norm.weight"),
        # Pre-2019 transformers' LayerNorm gamma and beta.
        (BERT, "bert.embeddings.LayerNorm.gamma", "bert.embeddings.LayerNorm.weight"),
        (
            BERT,
            "encoder.layer.3.output.LayerNorm.beta",
            "bert.encoder.layer.3.output.LayerNorm.bias",
        ),
        # Names already the class's, and the heads, stay as they are.
        (BERT, "cls.predictions.bias", "cls.predictions.bias"),
        (MODERNBERT, "decoder.weight", "decoder.weight"),
        (MODERNBERT, "head.norm.weight", "head.norm.weight"),
    ],
)
def test_a_checkpoints_name_variants_are_the_classs_names(arch, name, normal):
    assert arch.normalize(name) == normal
    assert arch.normalize(normal) == normal


def test_each_weight_has_one_name_and_the_tied_decoder_none():
    config = architectures.bert_config_from_hf(
        {"vocab_size": 99, "max_position_embeddings": 64, **tiny.SHAPE}
    )
    modern = dataclasses.replace(
        config, **architectures.MODERNBERT.block, local_attention=8, norm_bias=False
    )
    for arch, cfg in ((BERT, config), (MODERNBERT, modern)):
        assert architectures.architecture(cfg) is arch
        names = [name for _, name, _ in arch.rows(cfg, cfg.num_hidden_layers)]
        assert len(names) == len(set(names))
        assert not set(names) & arch.tied  # left out, as transformers' own save does
    # ModernBERT's norms without biases (norm_bias false) have no bias names.
    modern_names = [name for _, name, _ in MODERNBERT.rows(modern, modern.num_hidden_layers)]
    assert not [n for n in modern_names if "norm" in n and n.endswith(".bias")]


def test_a_bert_without_token_types_has_no_hugging_face_class():
    config = architectures.bert_config_from_hf(
        {"vocab_size": 99, "max_position_embeddings": 64, "type_vocab_size": 0, **tiny.SHAPE}
    )
    assert isinstance(config, BertConfig)
    with pytest.raises(cli.UserError, match="as a BertForPreTraining it has type_vocab_size=0"):
        architectures.architecture(config)
