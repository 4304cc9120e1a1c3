"""The data: what data_prep writes and the trainer reads (contract/), and how the trainer
reads it (input/). Importing bert_jax.data or bert_jax.data.contract imports no JAX."""
