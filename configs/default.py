"""Default configuration: BERT-Base shapes, the original BERT optimizer, phase-1 (L=128) data.

Every other config imports this one and overrides fields. Override any field from the command
line: `--config=configs/bert_base.py --config.optim.learning_rate=1e-4`.
"""

import ml_collections
from ml_collections import config_dict


def get_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()

    # --- Model (becomes a frozen bert_jax.model.encoder.BertConfig at one boundary) ---
    m = config.model = ml_collections.ConfigDict()
    # Rows of the word-embedding table. 0: the data's vocabulary size (from the manifest); a
    # larger value pads the table (e.g. to a multiple of 128), a smaller one is an error.
    m.vocab_size = 0
    m.hidden_size = 768
    m.num_hidden_layers = 12
    m.num_attention_heads = 12
    m.intermediate_size = 3072  # feed-forward width, 4x hidden in every published BERT
    m.hidden_dropout_prob = 0.1
    m.attention_probs_dropout_prob = 0.1
    m.max_position_embeddings = 512
    m.type_vocab_size = 2  # token-type (segment) embeddings; 0: none (ModernBERT)
    m.initializer_range = 0.02  # truncated-normal stddev, as the original
    m.layer_norm_eps = 1e-12  # BERT's (Flax's default 1e-6 breaks HF parity)
    m.dtype = "float32"  # computation dtype: "float32" or "bfloat16" (params stay float32)
    m.remat = False  # activation checkpointing per encoder layer: trades compute for memory
    # One lax.scan over the encoder layers (one layer compiled instead of num_hidden_layers; the
    # parameters keep their per-layer layout, so checkpoints and exports are the same either way).
    # None: scanned where the mesh's devices are TPUs or GPUs (BERT-Large's TPU compile 2.8x less
    # CPU, fewer HBM bytes), unrolled on CPU, where the scanned step ran at 0.92x.
    m.scan_layers = config_dict.placeholder(bool)
    # "auto": the Pallas splash-attention kernel on TPU for rows of 512 tokens and more, cuDNN's
    # fused attention on GPU in bfloat16, XLA otherwise; or "xla", "cudnn", "splash", "einsum".
    # While attention dropout is active (training, attention_probs_dropout_prob > 0) the einsum
    # path runs regardless: no fused kernel has dropout. attention_probs_dropout_prob=0 (as
    # MLPerf, ModernBERT, MosaicBERT) lets training use the fused kernels.
    m.attention_impl = "auto"
    # The encoder block, field by field: BERT's (Devlin et al. 2019) by default, or the modern
    # block of ModernBERT (Warner et al. 2024; transformers' ModernBertConfig has the same
    # fields) as configs/modernbert_base.py sets them; docs/model.md says where each comes from.
    # "absolute": a learned position table of max_position_embeddings rows; "rope": rotary
    # embeddings on queries and keys (no table; max_position_embeddings is then only the longest
    # row allowed, 8,192 for ModernBERT).
    m.position_embedding_type = "absolute"
    # RoPE's base in the global layers and in the sliding-window ones (ModernBERT: 160,000 and
    # 10,000; its 1,024-token stage trained the global one at 10,000 and raised it for 8,192).
    m.global_rope_theta = 160_000.0
    m.local_rope_theta = 10_000.0
    # "post": LN(x + sublayer(x)) (BERT); "pre": x + sublayer(LN(x)), with a final norm after the
    # last layer and none before the first layer's attention (the embedding norm precedes it).
    m.norm_position = "post"
    # "gelu": dense, GELU, dense (BERT); "geglu": GELU(x W) * (x V), then the output dense
    # (ModernBERT: W and V are its Wi, 2 x intermediate_size wide).
    m.mlp_type = "gelu"
    # Biases (ModernBERT has none but the decoder's): query/key/value and attention output; the
    # feed-forward layer's; every LayerNorm's; the MLM head's transform dense (transformers'
    # classifier_bias); the MLM output bias over the vocabulary.
    m.attention_bias = True
    m.mlp_bias = True
    m.norm_bias = True
    m.head_bias = True
    m.decoder_bias = True
    # Sliding-window attention: a query of a local layer reads the keys at most
    # local_attention // 2 positions away on either side (transformers' meaning: the total
    # window; ModernBERT: 128); layer i is global (the whole row) iff i % every_n == 0
    # (ModernBERT: 3). 0: every layer global (BERT). Packed rows keep each document to itself
    # either way.
    m.local_attention = 0
    m.global_attn_every_n_layers = 3
    # BERT's pooler (tanh(dense([CLS] state))) and next-sentence head; ModernBERT has neither
    # (MLM only; fine-tuning then reads the [CLS] state itself). The NSP head needs the pooler.
    m.pooler = True
    m.nsp_head = True
    # Output projections (attention output, feed-forward output, MLM transform) initialized with
    # stddev initializer_range / sqrt(2 * num_hidden_layers), as ModernBERT (and GPT-2) do.
    m.scale_init_by_depth = False
    # A ModernBERT block's task models (fine-tuning; transformers' ModernBertFor* fields of the
    # same names): a sentence is its first token's state ("cls") or its tokens' mean ("mean"),
    # through the head (the MLM head's dense, GELU and norm) and classifier_dropout; BERT's
    # task models read the pooler ("cls") and drop out at hidden_dropout_prob.
    m.classifier_pooling = "cls"
    m.classifier_dropout = 0.0

    # --- Data (bert_jax/data/contract/data_facts.py, bert_jax/data/input/pipeline.py) ---
    # Fields marked "from the manifest" are read from the manifest.json data_prep writes beside
    # its shards when they are left unset; a value set here must agree with it (an error names
    # both). Records without a manifest (google-research/bert's generator) need them set.
    d = config.data = ml_collections.ConfigDict()
    # Record files: a data_prep --output_dir (its train split), or comma-separated globs; beside a
    # manifest the shards come from the manifest (a glob picks among the shards it lists).
    # ArrayRecord or TFRecord, told apart by file name. e.g. "/data/wiki128".
    d.train_files = ""
    # Held-out records for eval: a data_prep --output_dir (its eval split) or globs; "" turns eval
    # off.
    d.eval_files = ""
    d.verify_md5 = False  # re-check every shard against its manifest md5 before training
    # Every record read is checked by what its format carries (TFRecord's CRC-32C, ArrayRecord's
    # chunk hashes). A damaged one: "error" ends the run naming the shard and record; "skip"
    # replaces it by a blank record that adds nothing to the loss, counts it (bad_records in the
    # train metrics, kept in checkpoints) and ends the run when more than max_bad_records were.
    d.bad_records = "error"
    d.max_bad_records = 100
    # Record files in a bucket (gs://...) are read from local copies kept here, fetched once and
    # checked against the manifest's md5 and size (each host holds all shards: the global
    # shuffle reads every one). "": $BERT_JAX_CACHE_DIR, else ~/.cache/bert_jax.
    d.cache_dir = ""
    d.max_seq_length = 0  # tokens per record; 0: from the manifest
    # Masked positions per record (the original: 20 at L=128, 76-80 at 512); with dynamic masking
    # the most positions masked per record. 0: from the manifest.
    d.max_predictions_per_seq = 0
    # Mask records at read time (records written unmasked, `data_prep --dynamic_masking`),
    # differently every epoch, instead of using the masks written into the records (the
    # original's static masking). None: from the manifest (True for unmasked records).
    d.dynamic_masking = config_dict.placeholder(bool)
    # Next-sentence prediction in the loss; False for MLM-only records (data_prep --nsp=false).
    # None: from the manifest.
    d.nsp = config_dict.placeholder(bool)
    # Dynamic masking only: share of tokens to predict. None: data_prep's --masked_lm_prob, 0.15.
    # BERT's 0.15; ModernBERT's and MosaicBERT's recipes train at 0.30 (configs/modern.py).
    d.masked_lm_prob = config_dict.placeholder(float)
    # Dynamic masking only: the share masked in the eval records, whatever masked_lm_prob, so
    # that held-out MLM accuracy means the same for recipes that train at other rates (ModernBERT
    # evaluates at 0.15 while it trains at 0.30; data_prep's --eval_masked_lm_prob does the same
    # for statically masked eval records). None: masked_lm_prob.
    d.eval_masked_lm_prob = 0.15
    # The vocabulary the records were tokenized with: not read in training, but saved with every
    # checkpoint (with its md5 and size) so that export and embed use and check it. "": from the
    # manifest.
    d.vocab_file = ""
    d.vocab_md5 = ""  # from the manifest
    d.vocab_size = 0  # ids in the records are below it; 0: from the manifest
    d.do_lower_case = config_dict.placeholder(bool)  # from the manifest
    # Special token ids (dynamic masking never masks [CLS]/[SEP], and masks with [MASK]).
    # None: from the manifest (bert-base-uncased's are 101, 102, 103).
    # Dynamic masking only: mask all pieces of a word together (data_prep's --do_whole_word_mask;
    # needs the vocabulary file, whose "##" or SentencePiece pieces say where words continue).
    # None: as the manifest says data_prep was asked (its whole_word_mask).
    d.whole_word_mask = config_dict.placeholder(bool)
    d.cls_token_id = config_dict.placeholder(int)
    d.sep_token_id = config_dict.placeholder(int)
    d.mask_token_id = config_dict.placeholder(int)
    d.num_workers = 0  # Grain worker processes decoding records (0: in the training process)
    d.read_threads = 4  # threads reading records per process
    d.prefetch_buffer_size = 256  # records read ahead per process
    # Pack several records into each row (bert_jax/data/input/packed_records.py): a step computes on
    # real tokens instead of padding, with every record's loss and gradient as unpacked. Pays
    # whenever records carry padding (the manifest's padding_fraction; 11-15% for pydocs at
    # L=128: 12% fewer rows, docs/performance.md), so configs/bert_base.py (hence the BERT-Base
    # and -Large recipes) turns it on. A batch is then global_batch_size rows of ~1.1 records.
    d.pack = False
    d.pack_max_examples = 4  # records per row at most
    d.pack_window = 1024  # records packed together (first-fit decreasing) per process

    # --- Optimizer (bert_jax/training/optim.py); defaults are the original BERT's ---
    o = config.optim = ml_collections.ConfigDict()
    o.optimizer = "adamw"  # "adamw" (the original's AdamWeightDecay) or "lamb" (You et al. 2019)
    o.learning_rate = 1e-4  # peak learning rate, reached at the end of warmup
    o.warmup_steps = 10_000  # linear warmup from 0
    # After warmup: "linear" or "polynomial" (with `power`) decay to end_learning_rate at the
    # last step, measured from step 0 as the original does; or "constant"; or "wsd"
    # (warmup-stable-decay, the trapezoid ModernBERT used: the peak until the last
    # decay_fraction of the steps, then decay_shape down to end_learning_rate).
    o.schedule = "linear"
    # "wsd" only: the share of train.num_train_steps spent decaying at the end. 0.1 is
    # Composer's WarmupStableDecayScheduler default (t_decay=0.1dur); 0 keeps the peak to the last
    # step (a stage whose decay a later stage runs, as ModernBERT's 1,024-token stage).
    o.decay_fraction = 0.1
    # "wsd" only: "linear", or "1-sqrt" (rate x (1 - sqrt(x)) at the decay's share x of its
    # steps: Hagele et al. 2024, ModernBERT's final decay).
    o.decay_shape = "linear"
    # Decay measured from "start" (step 0: the original's; the peak is never quite reached) or from
    # "warmup_end" (transformers': the peak is reached). Fine-tuning's default is "warmup_end".
    o.decay_from = "start"
    o.power = 1.0  # polynomial decay exponent
    o.end_learning_rate = 0.0
    o.weight_decay = 0.01  # decoupled; never on LayerNorm parameters or biases
    o.b1 = 0.9
    o.b2 = 0.999
    o.eps = 1e-6  # the original's (optax's default is 1e-8)
    o.bias_correction = False  # the original Adam skips it; True gives textbook Adam/AdamW
    o.max_grad_norm = 1.0  # clip the global gradient norm; 0 turns clipping off

    # --- Training loop (bert_jax/training/pretrain.py) ---
    t = config.train = ml_collections.ConfigDict()
    t.global_batch_size = 256  # sequences per optimizer step, over all devices and processes
    # Split each step's batch into this many micro-batches whose gradients are summed: the same
    # update as the whole batch at once, in 1/N of the activation memory.
    t.grad_accum_steps = 1
    # Batch-size warmup: over the first batch_warmup_steps steps the batch grows from
    # batch_warmup_start_accum micro-batches (of global_batch_size / grad_accum_steps rows) to
    # grad_accum_steps, one micro-batch at a time, equal steps at each size (ModernBERT grows its
    # batch from 768 to 4,608 sequences over its first 50B tokens, linearly in steps). Each size
    # compiles its own step once (bert_jax/data/input/growing_batches.py). 0: off.
    t.batch_warmup_steps = 0
    t.batch_warmup_start_accum = 1
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
    # Stop (after saving) once held-out MLM accuracy over all masked positions (mlm_accuracy_all,
    # MLPerf's metric) reaches this; MLPerf's BERT target is 0.720. 0 turns it off.
    e.target_mlm_accuracy = 0.0

    # --- Checkpoints (bert_jax/training/checkpoints.py), under <workdir>/checkpoints ---
    c = config.checkpoint = ml_collections.ConfigDict()
    c.every_steps = 5_000  # a run killed in between resumes from the last one, bit-exactly
    c.max_to_keep = 3  # older checkpoints are deleted; 0 keeps all
    c.async_save = True  # write in a background thread while training goes on

    # --- Device mesh (bert_jax/model/sharding.py) ---
    s = config.mesh = ml_collections.ConfigDict()
    # Sizes of the ('data', 'fsdp', 'tensor') axes; their product is the device count, and one
    # of them may be -1 to take the rest. data: replicate the model, split the batch. fsdp:
    # also split parameters and optimizer state (for models that do not fit one device).
    # tensor: split attention heads, MLP width and vocabulary (must divide num_attention_heads).
    s.data = -1
    s.fsdp = 1
    s.tensor = 1
    s.num_devices = 0  # use only the first N devices (0: all of them)
    # Weight-update sharding (MLPerf's TPU BERT, ZeRO stage 1): the Adam moments are split over
    # the batch's axes, gradients reduce-scattered, each device updates its share of the
    # parameters, which are all-gathered back. Same result; N-fold less optimizer work and
    # moment memory per device. False: every device updates every parameter.
    s.shard_update = True
    # Logical axis (named by model.py) -> mesh axes; see bert_jax/model/sharding.py.
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
