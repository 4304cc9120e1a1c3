"""Comparing what two training runs saved, and what a damaged one is refused with."""

import jax
import numpy as np
from etils import epath

from bert_jax.training import checkpoints

# What a step damaged by conftest's flip_bytes is refused with. Where the flipped bytes land in
# the largest array file depends on the order Orbax's writers finished in: inside compressed
# data, an array (usually the word embeddings, the largest; another one when the writers packed
# it there) restores as garbage and the checksums refuse it by name (the case Orbax alone would
# let through); on a zstd frame's header, the read itself fails.
FLIPPED_PARAMS = (
    r"(params/[\w/]+ differs from the checksum recorded when it was saved"
    r"|.*ZSTD_decompressStream\(\) failed: Data corruption detected)"
)


def assert_same_params(got_dir: str, want_dir: str) -> None:
    """The latest parameters under two workdirs are bit-identical (a failure names the leaf)."""
    got, _ = checkpoints.restore_params(got_dir)
    want, _ = checkpoints.restore_params(want_dir)
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], jax.tree.leaves(want)):
        np.testing.assert_array_equal(
            np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path)
        )


def saved_steps(workdir: str) -> list[int]:
    """Steps of the checkpoints in `workdir`, oldest first ([] if none), as a resume finds them."""
    if not epath.Path(checkpoints.checkpoint_dir(workdir)).is_dir():
        return []
    manager = checkpoints.make_manager(workdir, read_only=True)
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()
