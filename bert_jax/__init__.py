"""bert_jax: a Flax BERT, its sharded pre-training loop, and what uses the trained model. Data
flows one way, records -> batches -> steps -> checkpoints -> exports; each subpackage's
__init__.py maps its modules.

    main.py, embed.py, export.py   the binaries (python -m bert_jax.main, .embed, .export)
    cli.py          how every binary reports a mistake (cli.UserError), a bug and a warning
    runtime.py      how every binary starts JAX and how a stopped run exits
    data/contract/  what data_prep and the trainer agree on: manifest, shards, records, schema
    data/input/     record files -> Grain -> host batches (masking, packing, growing batches)
    text/           WordPiece and SentencePiece (tokenization), any tokenizer.json
    model/          BERT or the ModernBERT block in Flax NNX, and sharding: the mesh and its rules
    training/       the train step (pretrain), loop, optim, checkpoints, pretrained (read back)
    hf/             Hugging Face in and out: architectures, bert (save_hf, load_hf), publish
    storage/        files by name, local or in a bucket; workdir_lock (one run per directory)
    finetune/       python -m bert_jax.finetune: classification, pairs, tagging, SQuAD, LoRA
    plan/           python -m bert_jax.plan: the steps compiled for a TPU slice without one

Layers, lowest first: cli and storage; text and data/contract; data/input; model; hf; training;
runtime; finetune, plan and the binaries. A module imports only from its own layer and those
below (tests/unit/test_import_graph.py holds the rule: no exceptions, no cycles). Importing the
package imports nothing heavy: data.contract and text are JAX-free so that data_prep can use them.
"""
