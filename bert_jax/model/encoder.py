"""BERT in Flax NNX: embeddings, encoder, pooler and the pre-training model; layers.py holds the
blocks (2018 BERT or ModernBERT, by BertConfig), layer_stack.py runs them. Parameters are
float32, `BertConfig.dtype` is the computation dtype; dropout runs iff a `dropout_rng` is passed.
docs/model.md: "The model", "Sharding names and the weight-decay rule", "The modern block".
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bert_jax import cli
from bert_jax.model import layers as L
from bert_jax.model import rope
from bert_jax.model.bert_config import SHAPE_FIELDS, BertConfig
from bert_jax.model.dropout import dropout as _dropout
from bert_jax.model.layer_stack import run_layers
from bert_jax.model.layers import EncoderLayer
from bert_jax.model.sharding import LOGICAL_AXIS_NAMES

__all__ = ["LOGICAL_AXIS_NAMES", "SHAPE_FIELDS", "BertConfig", "BertForPreTraining", "BertModel"]


def _lookup(embed: nnx.Embed, ids: jax.Array, rows: str | None = None) -> jax.Array:
    """embed(ids) with the table's 'embed' dimension gathered first (`_whole_rows`)."""
    return jnp.take(_whole_rows(embed, rows), ids, axis=0).astype(embed.dtype)


def _whole_rows(embed: nnx.Embed, rows: str | None) -> jax.Array:
    """The table, its 'embed' dimension gathered (docs/model.md, "Sharding names")."""
    return L.constrain(embed.embedding[...], rows, None)


@jax.custom_vjp
def tied_lookup(table: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(table, table[ids]) with one gradient for both uses (docs/model.md, "The model")."""
    return table, jnp.take(table, ids, axis=0)


def _tied_lookup_fwd(table, ids):
    return tied_lookup(table, ids), ids


def _tied_lookup_bwd(ids, cotangents):
    ct_table, ct_rows = cotangents
    return ct_table.at[ids].add(ct_rows.astype(ct_table.dtype)), None


tied_lookup.defvjp(_tied_lookup_fwd, _tied_lookup_bwd)


class Embeddings(nnx.Module):
    """Word + position (absolute) + token type (if any) embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.word_embeddings = L.embed(cfg, cfg.vocab_size, ("vocab", "embed"), rngs)
        self.position_embeddings = (
            L.embed(cfg, cfg.max_position_embeddings, (None, "embed"), rngs)
            if cfg.position_embedding_type == "absolute"
            else None
        )
        self.token_type_embeddings = (
            L.embed(cfg, cfg.type_vocab_size, (None, "embed"), rngs)
            if cfg.type_vocab_size
            else None
        )
        self.layer_norm = L.layer_norm(cfg, rngs)

    @jax.named_scope("embeddings")
    def __call__(self, input_ids, segment_ids, dropout_rng=None, position_ids=None, word_rows=None):
        """`word_rows`: input_ids' word embeddings if already looked up (tied_lookup)."""
        if position_ids is None:
            position_ids = jnp.arange(input_ids.shape[1])[None, :]  # [1, length]
        if word_rows is None:
            word_rows = _lookup(self.word_embeddings, input_ids, "vocab")
        x = word_rows.astype(self.word_embeddings.dtype)
        if self.position_embeddings is not None:
            x = x + _lookup(self.position_embeddings, position_ids)
        if self.token_type_embeddings is not None:
            x = x + _lookup(self.token_type_embeddings, segment_ids)
        x = _dropout(self.layer_norm(x), self.cfg.hidden_dropout_prob, dropout_rng)
        return L.constrain(x, *L.ACT_EMBED)


class BertModel(nnx.Module):
    """Embeddings, encoder and pooler (without one, `pooled` is the first token's state)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embeddings = Embeddings(config, rngs=rngs)
        self.layers = nnx.List(
            [EncoderLayer(config, i, rngs=rngs) for i in range(config.num_hidden_layers)]
        )
        self.final_norm = L.layer_norm(config, rngs) if config.norm_position == "pre" else None
        h = config.hidden_size
        self.pooler = L.dense(config, h, h, ("embed", None), rngs) if config.pooler else None

    def _rope_tables(self, length: int, position_ids) -> dict | None:
        """RoPE's (cos, sin) per layer kind, computed once for all layers; None: absolute."""
        cfg = self.config
        if cfg.position_embedding_type != "rope":
            return None
        if position_ids is None:
            position_ids = jnp.arange(length)[None, :]  # [1, length]
        tables = {"global": rope.tables(position_ids, cfg.global_rope_theta, cfg.head_dim)}
        if cfg.local_attention:
            tables["local"] = rope.tables(position_ids, cfg.local_rope_theta, cfg.head_dim)
        return tables

    def _check_inputs(
        self, input_ids, input_mask, segment_ids, example_ids, position_ids, cls_positions
    ):
        names = ("input_ids", "input_mask", "segment_ids")
        shapes = dict(zip(names, map(np.shape, (input_ids, input_mask, segment_ids))))
        if (example_ids is None) != (position_ids is None):
            raise ValueError(
                "packed rows need both example_ids and position_ids "
                "(bert_jax.data.input.packing makes them)"
            )
        if example_ids is not None:
            shapes.update(example_ids=np.shape(example_ids), position_ids=np.shape(position_ids))
        if len(shapes["input_ids"]) != 2 or len(set(shapes.values())) != 1:
            raise ValueError(f"{', '.join(shapes)} must all be [batch, length]; got {shapes}")
        if cls_positions is not None and (
            np.ndim(cls_positions) != 2 or np.shape(cls_positions)[0] != shapes["input_ids"][0]
        ):
            raise ValueError(
                f"cls_positions must be [batch, examples per row], got {np.shape(cls_positions)} "
                f"for input_ids {shapes['input_ids']}"
            )
        if shapes["input_ids"][1] > self.config.max_position_embeddings:
            raise cli.UserError(
                f"sequence length {shapes['input_ids'][1]} exceeds max_position_embeddings "
                f"{self.config.max_position_embeddings}; shorten the inputs (max_seq_length)"
            )

    def __call__(
        self,
        input_ids,
        input_mask,
        segment_ids,
        *,
        example_ids=None,
        position_ids=None,
        cls_positions=None,
        dropout_rng=None,
        word_rows=None,
    ):
        """(sequence [B, L, H], pooled [B, H]). Packed rows pass `example_ids`, `position_ids`
        and, for pooled [B, E, H], `cls_positions` (docs/model.md, "The model")."""
        self._check_inputs(
            input_ids, input_mask, segment_ids, example_ids, position_ids, cls_positions
        )
        k_embed, k_layers = (
            jax.random.split(dropout_rng) if dropout_rng is not None else (None, None)
        )
        x = self.embeddings(input_ids, segment_ids, k_embed, position_ids, word_rows)
        x = run_layers(
            self.layers,
            x,
            input_mask,
            k_layers,
            example_ids,
            self._rope_tables(input_ids.shape[1], position_ids),
            remat=self.config.remat,
            scan=self.config.scan_layers,
        )
        if self.final_norm is not None:
            with jax.named_scope("norm_residual"):
                x = L.constrain(self.final_norm(x), *L.ACT_EMBED)
        if cls_positions is None:
            first = x[:, 0]  # [batch, hidden]
        else:
            first = gather(x, cls_positions)  # [batch, examples, hidden]
        return x, first if self.pooler is None else jnp.tanh(self.pooler(first))


def gather(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """sequence [B, L, H] at positions [B, K] -> [B, K, H] (out-of-range positions clipped)."""
    return jnp.take_along_axis(sequence, positions[..., None], axis=1, mode="clip")


class BertForPreTraining(nnx.Module):
    """BertModel plus the MLM head and the NSP head (without one, NSP logits are zeros)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.mlm = L.MaskedLMHead(config, rngs=rngs)
        h = config.hidden_size
        self.nsp = L.dense(config, h, 2, ("embed", None), rngs) if config.nsp_head else None

    def __call__(
        self,
        input_ids,
        input_mask,
        segment_ids,
        masked_lm_positions,
        *,
        example_ids=None,
        position_ids=None,
        cls_positions=None,
        dropout_rng=None,
    ):
        """(MLM logits [B, P, vocab] in the computation dtype, NSP logits [B, 2] float32).
        Packed rows pass all three packing inputs and get NSP logits [B, E, 2]."""
        if (example_ids is None) != (cls_positions is None):
            raise ValueError(
                "packed pre-training rows need example_ids, position_ids and cls_positions "
                "(the NSP head reads each example's [CLS])"
            )
        if (
            np.ndim(masked_lm_positions) != 2
            or np.shape(masked_lm_positions)[0] != np.shape(input_ids)[0]
        ):
            raise ValueError(
                f"masked_lm_positions must be [batch, predictions], got shape "
                f"{np.shape(masked_lm_positions)} for input_ids {np.shape(input_ids)}"
            )
        with jax.named_scope("embeddings"):
            table = _whole_rows(self.bert.embeddings.word_embeddings, "vocab")
            decoder_table, word_rows = tied_lookup(table, input_ids)
        sequence, pooled = self.bert(
            input_ids,
            input_mask,
            segment_ids,
            example_ids=example_ids,
            position_ids=position_ids,
            cls_positions=cls_positions,
            dropout_rng=dropout_rng,
            word_rows=word_rows,
        )
        # Gather before projecting: the vocabulary matmul then costs P, not L, rows per example.
        with jax.named_scope("mlm_head"):
            gathered = gather(sequence, masked_lm_positions)
        mlm_logits = self.mlm(gathered, decoder_table)
        if self.nsp is None:
            return mlm_logits, jnp.zeros((*pooled.shape[:-1], 2), jnp.float32)
        with jax.named_scope("nsp_head"):
            nsp_logits = self.nsp(pooled).astype(jnp.float32)
        return mlm_logits, nsp_logits


def count_params(model: nnx.Module) -> int:
    """Number of parameters (tied weights once); works on abstract models from nnx.eval_shape."""
    params = nnx.state(model, nnx.Param)
    return int(sum(math.prod(x.shape) for x in jax.tree.leaves(params)))


def model_from_params(config: BertConfig, params: Mapping) -> BertForPreTraining:
    """A BertForPreTraining holding `params` (a pure dict of nnx.Param state), no random init."""
    graphdef, state = nnx.split(
        nnx.eval_shape(lambda: BertForPreTraining(config, rngs=nnx.Rngs(0)))
    )
    shapes = lambda tree: {
        jax.tree_util.keystr(p): np.shape(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)
    }
    want, got = shapes(nnx.to_pure_dict(state)), shapes(params)  # `state` is abstract: shapes
    if want != got:
        diff = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        raise cli.UserError(
            f"the parameters do not fit this config at {diff[:4]} ({len(diff)} in all): expected "
            f"{[want.get(k) for k in diff[:4]]}, got {[got.get(k) for k in diff[:4]]}"
        )
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)
