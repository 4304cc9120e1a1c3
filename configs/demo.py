"""`make demo`: a 2-layer BERT pre-trained for a few minutes on 2 CPU cores, on
examples/data/pydocs.txt prepared by data_prep (examples/demo.py trains the vocabulary, writes
the records and fills in the data files).

What makes a model this small get past the most-frequent-token plateau in minutes, measured
(docs/training.md, "What makes the demo learn"): many predictions per step, i.e. a high masking
rate (examples/demo.py writes the records with --masked_lm_prob=0.4) and a batch of 64 short
(L=64) sequences; a vocabulary trained on the corpus (8,000 entries instead of 30,522: twice the
tokens per second). Smaller steps (batch 8) for longer, a higher or lower rate at batch 32, or
Adam's eps did not move held-out [MASK]-position accuracy off the plateau within 500-3000 steps.
"""

from configs import default


def get_config():
    config = default.get_config()
    m = config.model
    m.hidden_size = 64  # H
    m.num_hidden_layers = 2  # L
    m.num_attention_heads = 2  # A: head_dim 32
    m.intermediate_size = 256  # 4H
    m.max_position_embeddings = 64  # the demo's records are L=64
    # BERT's 0.02 was chosen for H=768 (Xavier gives 0.036 there); at H=64 Xavier gives 0.125.
    m.initializer_range = 0.1
    # Minutes of training are far from overfitting: dropout would only slow learning down.
    m.hidden_dropout_prob = 0.0
    m.attention_probs_dropout_prob = 0.0

    config.data.read_threads = 1  # decoding 64 short records a step is not the bottleneck
    # Held-out records masked at the training rate (0.4), as the figures in docs/training.md
    # were measured, not at the 0.15 that recipes are compared at.
    config.data.eval_masked_lm_prob = None

    o = config.optim
    o.learning_rate = 2e-3  # small models take a high rate
    o.warmup_steps = 100
    o.schedule = "constant"  # a run this short is all early training
    o.bias_correction = True  # AdamW proper: uncorrected, the first updates are 3x larger

    t = config.train
    t.global_batch_size = 64
    t.num_train_steps = 2500
    t.log_every_steps = 50

    e = config.eval
    e.every_steps = 100
    e.num_examples = 512  # of the ~940 held-out records: ~13k masked positions
    e.batch_size = 128

    config.checkpoint.every_steps = 200
    config.checkpoint.max_to_keep = 1
    config.mesh.num_devices = 1  # one CPU device uses both cores; fake devices only add overhead
    return config
