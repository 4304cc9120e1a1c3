"""BERT-Base phase 2: sequences of 512 tokens for the last 10% of the paper's 1M steps.

Starts from phase 1's last checkpoint with its optimizer state and step (900k), so the
learning-rate schedule goes on where phase 1 left it (1e-5, decaying to 0 at 1M). Pass phase 1's
workdir: --config.train.init_checkpoint=runs/base128 (see configs/bert_base.py). Records must be
written with --max_seq_length=512 --max_predictions_per_seq=76 (0.15 x 512, as MLPerf).
"""

from configs import bert_base


def get_config():
    config = bert_base.get_config()
    config.data.max_seq_length = 512
    config.data.max_predictions_per_seq = 76
    config.train.stop_at_step = 0  # run to the end of the schedule
    config.train.init_optimizer_state = True  # continue phase 1's schedule and Adam moments
    # On accelerators with less memory, split the batch: same update, less activation memory.
    config.train.grad_accum_steps = 1
    return config
