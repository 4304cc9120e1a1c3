"""The modern pre-training recipe (ModernBERT's, Warner et al. 2024) on configs/default.py's model:
MLM only on documents packed into rows, 30% dynamic masking (15% on the eval set), a
warmup-stable-decay schedule, StableAdamW with ModernBERT's betas, epsilon and decoupled weight
decay, and batch-size warmup. It runs with the 2018 BERT model as it is;
configs/modernbert_base.py puts it on the ModernBERT block. Where each number comes from:
docs/training.md, "The modern recipe".

The numbers are ModernBERT-base's stage 1 (yamls/modernbert/modernbert-base-pretrain.yaml in
github.com/AnswerDotAI/ModernBERT): 1,024-token rows, 4,608 of them a step (4.7M tokens), 1.719T
tokens. Records: `python -m data_prep.main --nsp=false --dynamic_masking --max_seq_length=1024
--short_seq_prob=0 --vocab_file=tokenizer.json ...` (docs/data_prep.md).

    python -m bert_jax.main --config=configs/modern.py --workdir=runs/modern \\
        --config.data.train_files=records --config.data.eval_files=records
"""

import math

from configs import default

SEQ_LENGTH = 1024  # stage 1 (configs/modernbert_base_8192.py: stage 2)
MASKED_LM_PROB = 0.30  # "FlexBERT should use 30% masking for optimal performance"
PACK_MAX_EXAMPLES = 32  # documents a row holds at most


def predictions_per_row(seq_length: int, pack_max_examples: int = PACK_MAX_EXAMPLES) -> int:
    """Masked positions a packed row needs room for: 30% of its tokens, plus one for each record's
    own rounding (each record of a row rounds its 30% on its own, at least 1)."""
    return math.ceil(MASKED_LM_PROB * seq_length) + pack_max_examples


def get_config():
    config = default.get_config()
    # BERT's absolute positions must cover the rows (the ModernBERT block uses RoPE instead).
    config.model.max_position_embeddings = SEQ_LENGTH

    d = config.data
    d.nsp = False  # MLM only (RoBERTa: NSP does not help)
    d.dynamic_masking = (
        True  # new masks every epoch (RoBERTa); records: data_prep --dynamic_masking
    )
    d.masked_lm_prob = MASKED_LM_PROB
    d.eval_masked_lm_prob = 0.15  # "We always evaluate at 15% masking for consistent comparison"
    d.whole_word_mask = False  # ModernBERT masks tokens (its sequence packer), not words
    d.max_seq_length = SEQ_LENGTH
    d.max_predictions_per_seq = predictions_per_row(SEQ_LENGTH)
    # Documents packed into rows, each attending to itself (sequence_packing: true); records
    # are one document's text each (short_seq_prob=0), so rows fill with whole documents.
    d.pack = True
    d.pack_max_examples = PACK_MAX_EXAMPLES
    d.pack_window = 1024

    o = config.optim
    # The yaml's optimizer (decoupled_stableadamw: optimi's StableAdamW, decouple_lr=True): AdamW
    # with each tensor's update divided by max(1, RMS(g^2 / v_hat)) (bert_jax/training/optim.py).
    o.optimizer = "stable_adamw"
    o.learning_rate = 8e-4  # ModernBERT-base's peak (large: 5e-4)
    o.b1, o.b2 = 0.9, 0.98
    o.eps = 1e-6
    o.bias_correction = True  # optimi's StableAdamW debiases its moments
    # ModernBERT's weight decay 1e-5 is "fully decoupled" (optimi's decouple_lr): each step
    # multiplies a weight by 1 - (lr_t / peak) x 1e-5. optax's decoupled decay subtracts
    # lr_t x weight_decay x weight, the same when weight_decay = 1e-5 / peak. Not on LayerNorm
    # parameters or biases (filter_bias_norm_wd), as BERT's.
    o.weight_decay = 1e-5 / o.learning_rate
    # StableAdamW replaces gradient clipping by its per-tensor update clipping; ModernBERT runs
    # without clipping.
    o.max_grad_norm = 0.0
    o.schedule = "wsd"
    # Warmup: 3B tokens. Under the batch warmup below a step holds 8/48 of the full batch at
    # first, growing linearly: 3B tokens are the first ~2,760 steps.
    o.warmup_steps = 2_760
    # Stage 1 stays at the peak (its yaml's t_decay: 0tok); the decay is stage 2's last 50B
    # tokens, 1 - sqrt (configs/modernbert_base_8192.py), so this run's schedule never decays.
    o.decay_fraction = 0.0
    o.decay_shape = "1-sqrt"
    o.end_learning_rate = 0.0  # alpha_f: 0

    t = config.train
    t.global_batch_size = 4_608  # global_train_batch_size
    t.grad_accum_steps = 48  # micro-batches of 96 rows (device_train_microbatch_size: 96)
    # Batch warmup from 768 rows (8 micro-batches, batch_size_warmup_min_size x 8 GPUs) to
    # 4,608 over 50B tokens: equal steps at each size, ~18,170 steps of 2.75M tokens on average.
    t.batch_warmup_steps = 18_170
    t.batch_warmup_start_accum = 8
    # 1.719T tokens: the warmup's 50B in 18,170 steps, then 4.72M tokens a step.
    t.num_train_steps = 18_170 + round((1_719e9 - 50e9) / (4_608 * SEQ_LENGTH))
    t.seed = 17

    config.eval.every_steps = 4_000  # eval_interval: 4000ba
    config.eval.batch_size = 1_024  # global_eval_batch_size
    config.checkpoint.every_steps = 4_000  # save_interval
    return config
