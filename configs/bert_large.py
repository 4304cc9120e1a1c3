"""BERT-Large (L=24, H=1024, A=16; about 340M parameters), phase 1 of the paper recipe."""
from configs import default


def get_config():
    config = default.get_config()
    config.model.hidden_size = 1024  # H
    config.model.num_hidden_layers = 24  # L
    config.model.num_attention_heads = 16  # A: head_dim 64
    config.model.intermediate_size = 4096  # 4H
    return config
