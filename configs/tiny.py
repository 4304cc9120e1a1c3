"""A tiny BERT for tests (L=2, H=32, A=2): compiles and steps in seconds on CPU."""
from configs import default


def get_config():
    config = default.get_config()
    config.model.hidden_size = 32
    config.model.num_hidden_layers = 2
    config.model.num_attention_heads = 2
    config.model.intermediate_size = 64
    config.model.max_position_embeddings = 128
    return config
