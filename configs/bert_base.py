"""BERT-Base (L=12, H=768, A=12; about 110M parameters), phase 1 of the paper recipe.

Devlin et al. 2019: batch 256, 1M steps, Adam(W) lr 1e-4 with 10k warmup steps and linear
decay, weight decay 0.01, dropout 0.1; sequences of 128 tokens for the first 90% of the steps,
512 for the last 10% (configs/bert_base_phase2.py). One learning-rate schedule spans both phases,
so this phase stops at step 900k of a 1M-step schedule and phase 2 continues it:

    python -m bert_jax.main --config=configs/bert_base.py --workdir=runs/base128 \\
        --config.data.train_files=records128 --config.data.eval_files=records128
    python -m bert_jax.main --config=configs/bert_base_phase2.py --workdir=runs/base512 \\
        --config.train.init_checkpoint=runs/base128 \\
        --config.data.train_files=records512 --config.data.eval_files=records512

records128 and records512 are data_prep output directories (their manifest.json gives the rest).
"""

from configs import default


def get_config():
    config = default.get_config()  # BERT-Base shapes and the original optimizer
    # The recipe's data (data_prep's defaults): records written otherwise are an error naming
    # both values, rather than a phase trained on the other phase's data. 0: take the data's.
    config.data.max_seq_length = 128
    config.data.max_predictions_per_seq = 20
    config.data.pack = True  # records have padding (short_seq_prob, document ends): pack them
    config.train.global_batch_size = 256
    config.train.num_train_steps = 1_000_000  # the schedule's length, both phases
    config.train.stop_at_step = 900_000  # phase 1 ends here; phase 2 takes the rest
    config.optim.learning_rate = 1e-4
    config.optim.warmup_steps = 10_000
    return config
