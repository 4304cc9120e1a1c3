"""`make demo`: a 2-layer BERT pre-trained for a few minutes on 2 CPU cores, on
examples/data/pydocs.txt prepared by data_prep (examples/demo.py fills in the data files).

On a CPU the step time is dominated by the masked-LM output layer (every masked position
against all 30,522 words) and held-out accuracy climbs with the number of steps far more than
with width or batch size (measured: at the same step, H=64 and H=128 or batch 8 and 16 differ
by about a point). So the demo takes many small steps with a narrow model.
"""

from configs import default


def get_config():
    config = default.get_config()
    m = config.model
    m.hidden_size = 64  # H
    m.num_hidden_layers = 2  # L
    m.num_attention_heads = 2  # A: head_dim 32
    m.intermediate_size = 256  # 4H
    m.max_position_embeddings = 128  # the demo's records are L=128
    # Minutes of training are far from overfitting: dropout would only slow learning down.
    m.hidden_dropout_prob = 0.0
    m.attention_probs_dropout_prob = 0.0

    config.data.read_threads = 1  # decoding 8 records a step is not the bottleneck

    o = config.optim
    o.learning_rate = 3e-3  # small models take a high rate; 5e-3 stalled at the unigram plateau
    o.warmup_steps = 50
    # No decay: a run this short is all early training (measured at step 1000: 0.127 held-out
    # accuracy constant vs 0.110 with the original's linear decay).
    o.schedule = "constant"
    o.bias_correction = True  # AdamW proper: uncorrected, the first updates are 3x larger

    t = config.train
    t.global_batch_size = 8
    t.num_train_steps = 1000
    t.log_every_steps = 50

    e = config.eval
    e.every_steps = 100
    e.num_examples = 512  # of the ~800 held-out records: +-0.3% on ~9k masked tokens
    e.batch_size = 128

    config.checkpoint.every_steps = 250
    config.checkpoint.max_to_keep = 1
    config.mesh.num_devices = 1  # one CPU device uses both cores; fake devices only add overhead
    return config
