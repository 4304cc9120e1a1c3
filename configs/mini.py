"""BERT-Mini (L=4, H=256, A=4; Turc et al. 2019): trains on a laptop CPU in minutes."""
from configs import default


def get_config():
    config = default.get_config()
    config.model.hidden_size = 256  # H
    config.model.num_hidden_layers = 4  # L
    config.model.num_attention_heads = 4  # A: head_dim 64 as in BERT-Base
    config.model.intermediate_size = 1024  # 4H
    return config
