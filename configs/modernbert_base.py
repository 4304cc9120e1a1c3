"""ModernBERT-base (Warner et al. 2024): 22 layers, hidden 768, 12 heads, GeGLU 2 x 1,152; 149M
parameters, as transformers' ModernBertForMaskedLM of answerdotai/ModernBERT-base.

The modern block (`modern_block`, shared with configs/modernbert_large.py): RoPE, pre-norm with
an embedding and a final norm, GeGLU, no biases but the decoder's, LayerNorm eps 1e-5, a
128-token sliding window with a global layer every third, 8,192-token context, no token types,
no pooler and no NSP head. Pre-training is MLM-only with 30% dynamic masking; the rest of the
recipe (optimizer, schedule, batch) is configs/default.py's until overridden. Records: MLM-only
(data_prep --nsp=false --dynamic_masking) with the vocabulary the model is to have (ModernBERT's
own tokenizer.json is 50,280 ids, its table padded to 50,368):

    python -m bert_jax.main --config=configs/modernbert_base.py --workdir=runs/mb \\
        --config.data.train_files=records --config.data.eval_files=records

Start from the published weights with --config.train.init_checkpoint=DIR (a ModernBERT
directory: bert_jax.hf reads transformers' names).
"""

from configs import default


def modern_block(m) -> None:
    """Sets config.model's block fields to ModernBERT's (configs/default.py says what each does)."""
    m.position_embedding_type = "rope"
    m.global_rope_theta = 160_000.0
    m.local_rope_theta = 10_000.0
    m.norm_position = "pre"
    m.mlp_type = "geglu"
    m.attention_bias = m.mlp_bias = m.norm_bias = m.head_bias = False
    m.decoder_bias = True
    m.local_attention = 128  # total: 64 tokens either side
    m.global_attn_every_n_layers = 3
    m.pooler = m.nsp_head = False
    m.type_vocab_size = 0
    m.layer_norm_eps = 1e-5
    m.max_position_embeddings = 8_192
    m.initializer_range = 0.02
    m.scale_init_by_depth = True
    # ModernBERT trains without dropout (its yaml's 0.1 on the attention output aside), which also
    # lets training use the fused attention kernels.
    m.hidden_dropout_prob = 0.0
    m.attention_probs_dropout_prob = 0.0


def mlm_only(config) -> None:
    """MLM-only records with 30% dynamic masking (ModernBERT's and MosaicBERT's rate)."""
    config.data.nsp = False
    config.data.dynamic_masking = True
    config.data.masked_lm_prob = 0.30


def get_config():
    config = default.get_config()
    m = config.model
    modern_block(m)
    m.vocab_size = 50_368  # its tokenizer's ids padded to a multiple of 64
    m.hidden_size = 768
    m.num_hidden_layers = 22
    m.num_attention_heads = 12
    m.intermediate_size = 1_152  # GeGLU: the input projection is 2 x 1,152 wide
    mlm_only(config)
    return config
