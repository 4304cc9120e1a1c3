"""ModernBERT-large (Warner et al. 2024): 28 layers, hidden 1,024, 16 heads, GeGLU 2 x 2,624;
395M parameters, as transformers' ModernBertForMaskedLM of answerdotai/ModernBERT-large. The
block and the MLM-only 30% masking are configs/modernbert_base.py's."""

from configs import default, modernbert_base


def get_config():
    config = default.get_config()
    m = config.model
    modernbert_base.modern_block(m)
    m.vocab_size = 50_368
    m.hidden_size = 1_024
    m.num_hidden_layers = 28
    m.num_attention_heads = 16
    m.intermediate_size = 2_624
    modernbert_base.mlm_only(config)
    return config
