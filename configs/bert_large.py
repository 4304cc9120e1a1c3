"""BERT-Large (L=24, H=1024, A=16; about 340M parameters), phase 1 of the paper recipe.

The same recipe as configs/bert_base.py (batch 256, 1M steps, lr 1e-4, 128 tokens for 900k
steps, then configs/bert_large_phase2.py at 512). For very large batches switch to LAMB
(--config.optim.optimizer=lamb, You et al. 2019, who trained BERT-Large with batches of 64k and
32k sequences) and raise the learning rate; bf16 compute: --config.model.dtype=bfloat16.
"""

from configs import bert_base


def get_config():
    config = bert_base.get_config()
    config.model.hidden_size = 1024  # H
    config.model.num_hidden_layers = 24  # L
    config.model.num_attention_heads = 16  # A: head_dim 64
    config.model.intermediate_size = 4096  # 4H
    return config
