"""BERT-Mini (L=4, H=256, A=4; Turc et al. 2019): a one-GPU recipe."""

from configs import default


def get_config():
    config = default.get_config()
    config.model.hidden_size = 256  # H
    config.model.num_hidden_layers = 4  # L
    config.model.num_attention_heads = 4  # A: head_dim 64 as in BERT-Base
    config.model.intermediate_size = 1024  # 4H
    # A single-GPU-sized run: long enough to see held-out MLM accuracy climb well past the
    # unigram plateau on a few hundred MB of text. On 2 CPU cores it reaches a few hundred steps
    # an hour, still in warmup: configs/cpu.py is the CPU recipe (docs/training.md).
    config.train.global_batch_size = 32
    config.train.num_train_steps = 10_000
    config.optim.learning_rate = 5e-4  # small models train well at a higher rate than Base
    config.optim.warmup_steps = 500
    config.train.log_every_steps = 50
    config.eval.every_steps = 500
    config.eval.num_examples = 2_000
    config.eval.batch_size = 64
    config.checkpoint.every_steps = 500
    return config
