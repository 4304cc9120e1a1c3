"""Comparing what two training runs saved."""

import jax
import numpy as np

from bert_jax import checkpointing


def assert_same_params(got_dir: str, want_dir: str) -> None:
    """The latest parameters under two workdirs are bit-identical (a failure names the leaf)."""
    got, _ = checkpointing.restore_params(got_dir)
    want, _ = checkpointing.restore_params(want_dir)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
        np.testing.assert_array_equal(
            np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path)
        )
