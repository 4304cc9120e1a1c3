"""Default configuration: BERT-Base shapes, the original BERT optimizer, phase-1 (L=128) data.

Every other config imports this one and overrides fields. Override any field from the command
line: `--config=configs/bert_base.py --config.optim.learning_rate=1e-4`.
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()

    # --- Model (becomes a frozen bert_jax.model.BertConfig at one boundary) ---
    m = config.model = ml_collections.ConfigDict()
    m.vocab_size = 30522  # bert-base-uncased; must match the vocab.txt used by data_prep
    m.hidden_size = 768
    m.num_hidden_layers = 12
    m.num_attention_heads = 12
    m.intermediate_size = 3072  # feed-forward width, 4x hidden in every published BERT
    m.hidden_dropout_prob = 0.1
    m.attention_probs_dropout_prob = 0.1
    m.max_position_embeddings = 512
    m.type_vocab_size = 2
    m.initializer_range = 0.02  # truncated-normal stddev, as the original
    m.layer_norm_eps = 1e-12  # BERT's (Flax's default 1e-6 breaks HF parity)
    m.dtype = "float32"  # computation dtype: "float32" or "bfloat16" (params stay float32)
    m.remat = False  # activation checkpointing per encoder layer: trades compute for memory
    # "auto": cuDNN fused attention on GPU in bfloat16, XLA otherwise; or "xla", "cudnn", "einsum".
    # While attention dropout is active (training, attention_probs_dropout_prob > 0) the einsum
    # path runs regardless: JAX's fused attention has no dropout.
    m.attention_impl = "auto"

    return config
