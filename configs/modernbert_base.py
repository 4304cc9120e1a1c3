"""ModernBERT-base, stage 1 of its pre-training: 1,024-token rows, global RoPE theta 10,000
(configs/modern.py's recipe; stage 2, 8,192 tokens: configs/modernbert_base_8192.py).

Needs the ModernBERT block in bert_jax/model.py (issue 35: RoPE, GeGLU, pre-norm, local/global
attention, no biases); until it reads the fields marked "ModernBERT block" below, building this
config's model is refused as naming unknown config.model fields. Records from ModernBERT's own
tokenizer.json (a BPE with [CLS] [SEP] [MASK]) or one `python -m data_prep.vocab
--model_type=bpe` trains:

    python -m data_prep.main --input=CORPUS --vocab_file=tokenizer.json --output_dir=records1k \\
        --nsp=false --dynamic_masking --max_seq_length=1024 --short_seq_prob=0
    python -m bert_jax.main --config=configs/modernbert_base.py --workdir=runs/mb1k \\
        --config.data.train_files=records1k --config.data.eval_files=records1k
"""

from configs import modern


def get_config():
    config = modern.get_config()
    m = config.model
    # ModernBERT-base's shapes (its config.json): 149M parameters.
    m.vocab_size = 50_368  # its tokenizer's 50,285 ids padded to a multiple of 64
    m.hidden_size = 768
    m.num_hidden_layers = 22
    m.num_attention_heads = 12
    m.intermediate_size = 1_152  # GeGLU: the input projection is 2 x 1,152 wide
    m.max_position_embeddings = 8_192
    m.layer_norm_eps = 1e-5  # norm_eps
    m.initializer_range = 0.02
    # The pre-training yaml: no dropout but 0.1 on the attention output (attn_out_dropout_prob),
    # which this model's one hidden_dropout_prob cannot single out.
    m.hidden_dropout_prob = 0.0
    m.attention_probs_dropout_prob = 0.0
    # ModernBERT block: the rotary embedding's base (theta) in the global-attention layers and in
    # the local (sliding-window) ones, as transformers' ModernBertConfig names them
    # (global_rope_theta, local_rope_theta). Stage 1 trains both at 10,000 (rotary_emb_base in
    # the stage-1 yaml); stage 2 raises the global one to 160,000 for 8,192-token context.
    m.global_rope_theta = 10_000.0
    m.local_rope_theta = 10_000.0
    return config
