"""bert_jax: a Flax BERT, its sharded pre-training loop, and what uses the trained model.

Data flows one way, records -> batches -> steps -> checkpoints -> exports:

    main.py            the binary: python -m bert_jax.main --config=configs/... --workdir=DIR
    config_check.py    pre-training's one validation pass (fine-tuning's, finetune/config_check.py,
                       is built from its parts): a config's mistakes, all named before anything
                       compiles
    data_contract.py   config + the data's manifest.json -> the facts every stage uses
    manifest.py        manifest.json: its fields, its one reader (load), data_prep's file names
    shard_files.py     the shards a manifest lists (find_shards) and the one shard check
                       (shard_problem: data_prep's reruns and --verify, and the trainer)
    features.py        the record schema; record_io.py reads and writes TFRecord/ArrayRecord
                       (the one TFRecord parser)
    storage/           files by name, local or in a bucket (gs://, s3://): paths (each binary's
                       path flags parsed once), remote (clients, the one retry budget), errors
                       (a bucket's failures in a local path's words), files, exclusive, cache
    tokenization.py    WordPiece (the original's rules, exactly) and SentencePiece;
                       tokenizer_json.py: any Hugging Face tokenizer.json (BPE, Unigram, WordPiece)
    record_sources.py  record files as Grain sources (TFRecordSource, CheckedSource)
    input_pipeline.py  record sources -> Grain -> host batches (masking.py: dynamic masking,
                       packing.py + packed_records.py: several sequences a row,
                       growing_batches.py: batch-size warmup)
    model.py           BERT or the ModernBERT block in Flax NNX, field by field
                       (model_config.py: BertConfig; layers.py: the blocks and the encoder
                       layer; layer_stack.py: the layers run or scanned in groups; rope.py;
                       attention.py: the kernels, dropout.py: the masks, mixed_matmul.py:
                       bfloat16 matmuls at a CPU's bf16 instruction speed)
    losses.py, optim.py   the pre-training losses (and held-out accuracy by kind of masked
                       position); BERT's AdamW and LAMB with their schedules (warmup-stable-
                       decay too) and batch-size warmup
    sharding.py        the device mesh and every sharding rule
    train_state.py     the train state both trainers share: Setup and its one builder, its
                       layout on the mesh, step 0, one optimizer step that keeps NaNs out of
                       the parameters
    train.py           pre-training's jitted steps and train_and_evaluate (collapse.py: the
                       eval-time warning for a run whose outputs are all the same)
    loop.py            the loop skeleton both trainers run: when to log, eval, save and stop
    faults.py          SIGTERM and non-finite steps; checkpointing.py (+ checksums.py): Orbax
                       checkpoints that resume exactly and refuse damaged files
    metrics_log.py     TensorBoard, metrics.jsonl and the progress line
    pretrained.py      a trained model read back (a workdir or a Hugging Face directory): the
                       one loader behind export.py, embed.py and finetune/ (hf.py: the weights'
                       names both ways, hf_modernbert.py ModernBERT's, hf_files.py the files);
                       its vocabulary loaded and checked once
    finetune/          classification, pairs, tagging, SQuAD and LoRA on top (its own map)
    plan/              the planner, python -m bert_jax.plan: the steps compiled for a TPU slice
                       without one, what fits and where the HBM bytes go (its own map)
    runtime.py         how every binary starts JAX (cpu_malloc.py: glibc malloc settings
                       that let XLA:CPU reuse a step's memory; the TPU compiler flags; the
                       trainers' --distributed) and how a run a signal stopped exits
    cli.py             how every binary reports a mistake (a cli.UserError: one `error:` line,
                       exit status 2), a bug (its traceback and a request to report it, exit
                       1) and a warning (cli.warn)

Importing the package imports nothing heavy: `bert_jax.features` and
`bert_jax.tokenization` are JAX-free so that data_prep can use them.
"""
