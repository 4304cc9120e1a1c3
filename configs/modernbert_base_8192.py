"""ModernBERT-base, stage 2: context extension to 8,192 tokens, then the decay.

Goes on from stage 1's last checkpoint with its optimizer state and step (one schedule over both
stages, as bert_base_phase2.py does for BERT), on records of 8,192 tokens, with the global
layers' RoPE theta raised to 160,000. The paper's stage 2 (Warner et al. 2024, section 2.2.3):
300B tokens, the first 250B at a constant 3e-4, the last 50B a 1 - sqrt decay to 0. Here at
stage 1's 4.72M tokens a step (576 rows of 8,192).

    python -m data_prep.main --input=CORPUS --vocab_file=tokenizer.json --output_dir=records8k \\
        --nsp=false --dynamic_masking --max_seq_length=8192 --short_seq_prob=0
    python -m bert_jax.main --config=configs/modernbert_base_8192.py --workdir=runs/mb8k \\
        --config.train.init_checkpoint=runs/mb1k \\
        --config.data.train_files=records8k --config.data.eval_files=records8k
"""

from configs import modern, modernbert_base

SEQ_LENGTH = 8_192
ROWS = 4_608 * modern.SEQ_LENGTH // SEQ_LENGTH  # 576: stage 1's tokens a step
STEPS = round(300e9 / (ROWS * SEQ_LENGTH))  # 63,578
DECAY_STEPS = round(50e9 / (ROWS * SEQ_LENGTH))  # 10,596


def get_config():
    config = modernbert_base.get_config()
    stage1_steps = config.train.num_train_steps
    config.model.global_rope_theta = 160_000.0  # local layers keep 10,000

    d = config.data
    d.max_seq_length = SEQ_LENGTH
    d.pack_max_examples = 64  # 8,192-token rows hold more short documents
    d.max_predictions_per_seq = modern.predictions_per_row(SEQ_LENGTH, d.pack_max_examples)

    t = config.train
    t.init_optimizer_state = True  # stage 1's step and Adam moments: the schedule goes on
    t.num_train_steps = stage1_steps + STEPS  # the step count runs over both stages
    t.global_batch_size = ROWS
    t.grad_accum_steps = 48  # micro-batches of 12 rows: stage 1's 96 x 1,024 tokens
    t.batch_warmup_steps = 0  # stage 1 had it

    o = config.optim
    o.learning_rate = 3e-4  # the stage's constant rate, then the decay from it
    o.weight_decay = 1e-5 / o.learning_rate  # decoupled from the rate as in stage 1
    o.decay_fraction = DECAY_STEPS / t.num_train_steps  # the last 50B tokens
    o.decay_shape = "1-sqrt"
    return config
