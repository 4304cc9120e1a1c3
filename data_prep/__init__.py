"""data_prep: raw text -> masked MLM/NSP training records (TFRecord or ArrayRecord) + manifest.

Data flows one way, text -> units -> instances -> records -> shards + manifest.json. Which module
does what: docs/data_prep.md, "Code map"; the contract the trainer reads: bert_jax/data/contract/.
"""
