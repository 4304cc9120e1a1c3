"""BERT-Large phase 2: 512-token sequences for the last 100k of the 1M steps (see
bert_base_phase2.py).

    python -m bert_jax.main --config=configs/bert_large_phase2.py --workdir=runs/large512 \\
        --config.train.init_checkpoint=runs/large128 --config.data.train_files=...
"""

from configs import bert_large


def get_config():
    config = bert_large.get_config()
    config.data.max_seq_length = 512
    config.data.max_predictions_per_seq = 76
    config.train.stop_at_step = 0
    config.train.init_optimizer_state = True
    config.train.grad_accum_steps = 1  # raise it (e.g. 4) where 256 x 512 tokens do not fit
    return config
