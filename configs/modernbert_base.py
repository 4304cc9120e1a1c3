"""ModernBERT-base (Warner et al. 2024), stage 1 of its pre-training: 22 layers, hidden 768, 12
heads, GeGLU 2 x 1,152; 149M parameters, as transformers' ModernBertForMaskedLM of
answerdotai/ModernBERT-base, on configs/modern.py's recipe (1,024-token packed rows, MLM only at
30% with the eval set at 15%, warmup-stable-decay, ModernBERT's AdamW). Stage 2, 8,192 tokens:
configs/modernbert_base_8192.py.

The modern block (`modern_block`, shared with configs/modernbert_large.py): RoPE, pre-norm with
an embedding and a final norm, GeGLU, no biases but the decoder's, LayerNorm eps 1e-5, a
128-token sliding window with a global layer every third, 8,192-token context, no token types,
no pooler and no NSP head. Records: MLM-only from ModernBERT's own tokenizer.json (a BPE with
[CLS] [SEP] [MASK]; 50,280 ids, the table padded to 50,368) or one `python -m data_prep.vocab
--model_type=bpe` trains:

    python -m data_prep.main --input=CORPUS --vocab_file=tokenizer.json --output_dir=records1k \\
        --nsp=false --dynamic_masking --max_seq_length=1024 --short_seq_prob=0
    python -m bert_jax.main --config=configs/modernbert_base.py --workdir=runs/mb1k \\
        --config.data.train_files=records1k --config.data.eval_files=records1k

Start from the published weights with --config.train.init_checkpoint=DIR (a ModernBERT
directory: bert_jax.hf.bert reads transformers' names).
"""

from configs import modern


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


def get_config():
    config = modern.get_config()
    m = config.model
    modern_block(m)
    # Stage 1 trains both RoPE bases at 10,000 (rotary_emb_base in the stage-1 yaml); stage 2
    # raises the global layers' to 160,000 for 8,192-token context.
    m.global_rope_theta = 10_000.0
    m.vocab_size = 50_368  # its tokenizer's ids padded to a multiple of 64
    m.hidden_size = 768
    m.num_hidden_layers = 22
    m.num_attention_heads = 12
    m.intermediate_size = 1_152  # GeGLU: the input projection is 2 x 1,152 wide
    return config
