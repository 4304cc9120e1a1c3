"""bert_jax: a Flax BERT and its sharded pre-training loop.

Importing the package imports nothing heavy: `bert_jax.features` and
`bert_jax.tokenization` are JAX-free so that data_prep can use them.
"""
