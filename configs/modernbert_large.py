"""ModernBERT-large (Warner et al. 2024): 28 layers, hidden 1,024, 16 heads, GeGLU 2 x 2,624;
395M parameters, as transformers' ModernBertForMaskedLM of answerdotai/ModernBERT-large. The
block is configs/modernbert_base.py's, the recipe configs/modern.py's at large's peak rate."""

from configs import modern, modernbert_base


def get_config():
    config = modern.get_config()
    m = config.model
    modernbert_base.modern_block(m)
    m.global_rope_theta = 10_000.0  # stage 1, as modernbert_base.py
    m.vocab_size = 50_368
    m.hidden_size = 1_024
    m.num_hidden_layers = 28
    m.num_attention_heads = 16
    m.intermediate_size = 2_624
    o = config.optim
    o.weight_decay *= o.learning_rate / 5e-4  # decoupled from the rate (configs/modern.py)
    o.learning_rate = 5e-4  # ModernBERT-large's peak
    return config
