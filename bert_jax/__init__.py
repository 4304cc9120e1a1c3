"""bert_jax: a Flax BERT, its sharded pre-training loop, and what uses the trained model.

Data flows one way, records -> batches -> steps -> checkpoints -> exports; each subpackage's
__init__.py maps its modules.

    main.py       the binary: python -m bert_jax.main --config=configs/... --workdir=DIR
    embed.py      python -m bert_jax.embed: a trained model's embeddings of text
    export.py     python -m bert_jax.export: a workdir's checkpoint as a Hugging Face directory
    cli.py        how every binary reports a mistake (cli.UserError: `error:`, exit 2), a bug
                  (its traceback, exit 1) and a warning (cli.warn)
    runtime.py    how every binary starts JAX (the trainers' --distributed, the TPU compiler
                  flags, XLA:CPU's malloc settings) and how a stopped run exits

    data/contract/  what data_prep and the trainer agree on: manifest.json (manifest), the facts
                    a run takes from it (data_facts), the shards it lists (shard_files), the
                    record schema (features) and the record files (record_io)
    data/input/     record files -> Grain -> host batches: sources, bad_records, pipeline,
                    masking (dynamic), packing + packed_records, growing_batches
    text/           WordPiece and SentencePiece (tokenization), any tokenizer.json (tokenizer_json)
    model/          BERT or the ModernBERT block in Flax NNX: encoder, bert_config, layers,
                    layer_stack, rope, attention, dropout, mixed_matmul, sharding (the mesh and
                    every sharding rule: the model's logical axes on it)
    training/       pre-training's steps (pretrain), the train state both trainers share
                    (train_state), the loop, optim, losses, checkpoints (+ checksums; also
                    where a run starts from),
                    faults, metrics_log, collapse, config_check (pre-training's one validation
                    pass), pretrained (a trained model read back: the one loader behind export,
                    embed and finetune/)
    hf/             Hugging Face in and out: architectures (BERT's and ModernBERT's configs
                    and names both ways; modernbert: its config.json), bert (save_hf, load_hf),
                    files, publish (an export's directory written whole)
    storage/        files by name, local or in a bucket (gs://, s3://); workdir_lock (one run
                    per directory it writes)
    finetune/       python -m bert_jax.finetune: classification, pairs, tagging, SQuAD and LoRA
    plan/           python -m bert_jax.plan: the steps compiled for a TPU slice without one, what
                    fits and where the HBM bytes go

Layers, lowest first: cli and storage; text and data/contract; data/input; model; hf; training;
runtime; finetune, plan and the binaries. A module imports only from its
own layer and those below (tests/unit/test_import_graph.py holds the rule: no exceptions, no
cycles).

Importing the package imports nothing heavy: bert_jax.data.contract (and bert_jax.data) and
bert_jax.text are JAX-free so that data_prep can use them.
"""
