"""Default configuration: BERT-Base shapes, the original BERT optimizer, phase-1 (L=128) data.

Every other config imports this one and overrides fields. Override any field from the command
line: `--config=configs/bert_base.py --config.optim.learning_rate=1e-4`.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()

    # --- Model (becomes a frozen bert_jax.model.BertConfig at one boundary) ---
    m = config.model = ml_collections.ConfigDict()
    m.vocab_size = 30522  # bert-base-uncased; must match the vocab.txt used by data_prep
    m.hidden_size = 768
    m.num_hidden_layers = 12
    m.num_attention_heads = 12
    m.intermediate_size = 3072  # feed-forward width, 4x hidden in every published BERT
    m.hidden_dropout_prob = 0.1
    m.attention_probs_dropout_prob = 0.1
    m.max_position_embeddings = 512
    m.type_vocab_size = 2
    m.initializer_range = 0.02  # truncated-normal stddev, as the original
    m.layer_norm_eps = 1e-12  # BERT's (Flax's default 1e-6 breaks HF parity)
    m.dtype = "float32"  # computation dtype: "float32" or "bfloat16" (params stay float32)
    m.remat = False  # activation checkpointing per encoder layer: trades compute for memory
    # "auto": cuDNN fused attention on GPU in bfloat16, XLA otherwise; or "xla", "cudnn", "einsum".
    # While attention dropout is active (training, attention_probs_dropout_prob > 0) the einsum
    # path runs regardless: JAX's fused attention has no dropout.
    m.attention_impl = "auto"

    # --- Data (bert_jax/input_pipeline.py) ---
    d = config.data = ml_collections.ConfigDict()
    # Record files: comma-separated globs; ArrayRecord (data_prep's default) or TFRecord (the
    # original generator's), told apart by file name. e.g. "/data/wiki/train-*.arrayrecord".
    d.train_files = ""
    d.eval_files = ""  # held-out records for eval; "" turns eval off
    # The vocab.txt the records were tokenized with: not read in training, but saved with every
    # checkpoint so `python -m bert_jax.export` can copy it next to the exported model.
    d.vocab_file = ""
    d.max_seq_length = 128  # must equal the length the records were written with
    d.max_predictions_per_seq = (
        20  # masked positions per record (the original: 20 at L=128, 76-80 at 512)
    )
    # Mask records at read time (records written unmasked), differently every epoch, instead
    # of using the masks written into the records (the original's static masking).
    d.dynamic_masking = False
    d.masked_lm_prob = 0.15  # dynamic masking only: share of tokens to predict
    # Special token ids of the vocabulary (bert-base-uncased's): never masked / the mask token.
    d.cls_token_id = 101
    d.sep_token_id = 102
    d.mask_token_id = 103
    d.num_workers = 0  # Grain worker processes decoding records (0: in the training process)
    d.read_threads = 4  # threads reading records per process
    d.prefetch_buffer_size = 256  # records read ahead per process
    # False for MLM-only records (data_prep --nsp=false; the manifest's "nsp"): no NSP loss.
    d.nsp = True
    # Pack several records into each row (bert_jax/packed_records.py): a step computes on real
    # tokens instead of padding, with every record's loss and gradient as unpacked. Pays
    # whenever records carry padding (the manifest's padding_fraction; 11-15% for pydocs at
    # L=128: 12% fewer rows, docs/performance.md), so configs/bert_base.py (hence the BERT-Base
    # and -Large recipes) turns it on. A batch is then global_batch_size rows of ~1.1 records.
    d.pack = False
    d.pack_max_examples = 4  # records per row at most
    d.pack_window = 1024  # records packed together (first-fit decreasing) per process

    # --- Optimizer (bert_jax/optim.py); defaults are the original BERT's ---
    o = config.optim = ml_collections.ConfigDict()
    o.optimizer = "adamw"  # "adamw" (the original's AdamWeightDecay) or "lamb" (You et al. 2019)
    o.learning_rate = 1e-4  # peak learning rate, reached at the end of warmup
    o.warmup_steps = 10_000  # linear warmup from 0
    # After warmup: "linear" or "polynomial" (with `power`) decay to end_learning_rate at the
    # last step, measured from step 0 as the original does; or "constant".
    o.schedule = "linear"
    o.power = 1.0  # polynomial decay exponent
    o.end_learning_rate = 0.0
    o.weight_decay = 0.01  # decoupled; never on LayerNorm parameters or biases
    o.b1 = 0.9
    o.b2 = 0.999
    o.eps = 1e-6  # the original's (optax's default is 1e-8)
    o.bias_correction = False  # the original Adam skips it; True gives textbook Adam/AdamW
    o.max_grad_norm = 1.0  # clip the global gradient norm; 0 turns clipping off

    # --- Training loop (bert_jax/train.py) ---
    t = config.train = ml_collections.ConfigDict()
    t.global_batch_size = 256  # sequences per optimizer step, over all devices and processes
    # Split each step's batch into this many micro-batches whose gradients are summed: the same
    # update as the whole batch at once, in 1/N of the activation memory.
    t.grad_accum_steps = 1
    t.num_train_steps = 1_000_000  # optimizer steps (the paper: 1M at batch 256)
    t.seed = 0  # parameter init, data order, dropout and dynamic masking all derive from it
    t.log_every_steps = 100  # train metrics to TensorBoard/JSONL and a progress line
    # Initial parameters: a workdir (its latest checkpoint; phase 2 after phase 1) or a Hugging
    # Face BERT directory (continue pre-training a public model). The optimizer, step and data
    # position start fresh. Ignored when the run resumes from its own checkpoint.
    t.init_checkpoint = ""
    # With init_checkpoint a workdir: also take its optimizer state and step, i.e. continue that
    # run's schedule on new data (phase 2 of the paper recipe: one schedule over both phases).
    t.init_optimizer_state = False
    # End this run at this global step (saving a checkpoint) though the schedule runs on to
    # num_train_steps: phase 1 of the paper recipe stops at 90%. Rerun with a later stop_at_step
    # (or 0) to go on from there. 0: off.
    t.stop_at_step = 0
    # A step whose loss or gradients are NaN/inf never updates the parameters or optimizer state;
    # it is counted (metric `nonfinite_steps`). Then "stop": end the run without saving, keeping
    # the last good checkpoint, and exit non-zero: in float32 BERT pre-training a non-finite step
    # means divergence or bad data, which a person should look at. "skip": go on with the next
    # batch (the step count still advances), for long runs that should survive a rare bad batch.
    t.on_nonfinite = "stop"

    # --- Evaluation on config.data.eval_files ---
    e = config.eval = ml_collections.ConfigDict()
    e.every_steps = 10_000  # 0: only at the end of training
    e.num_examples = 10_000  # the first N eval records (MLPerf: a fixed 10k); 0: all
    e.batch_size = 256  # global eval batch
    # Stop (after saving) once held-out MLM accuracy reaches this; MLPerf's BERT target is 0.720.
    # 0 turns it off.
    e.target_mlm_accuracy = 0.0

    # --- Checkpoints (bert_jax/checkpointing.py), under <workdir>/checkpoints ---
    c = config.checkpoint = ml_collections.ConfigDict()
    c.every_steps = 5_000  # a run killed in between resumes from the last one, bit-exactly
    c.max_to_keep = 3  # older checkpoints are deleted; 0 keeps all
    c.async_save = True  # write in a background thread while training goes on

    # --- Device mesh (bert_jax/sharding.py) ---
    s = config.mesh = ml_collections.ConfigDict()
    # Sizes of the ('data', 'fsdp', 'tensor') axes; their product is the device count, and one
    # of them may be -1 to take the rest. data: replicate the model, split the batch. fsdp:
    # also split parameters and optimizer state (for models that do not fit one device).
    # tensor: split attention heads, MLP width and vocabulary (must divide num_attention_heads).
    s.data = -1
    s.fsdp = 1
    s.tensor = 1
    s.num_devices = 0  # use only the first N devices (0: all of them)
    # Logical axis (named by model.py) -> mesh axes; see bert_jax/sharding.py.
    s.rules = (
        ("batch", ("data", "fsdp")),
        ("vocab", "tensor"),
        ("embed", "fsdp"),
        ("mlp", "tensor"),
        ("heads", "tensor"),
        ("kv", None),
        ("length", None),
        ("norm", None),
    )

    return config
