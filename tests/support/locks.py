"""Who holds a directory's lock (bert_jax.storage.workdir_lock), for tests that watch it."""

from bert_jax import storage
from bert_jax.storage import workdir_lock


def holder(directory: str) -> dict | None:
    """The content of `directory`'s lock ({} if it is no lock of ours), or None if none is
    held."""
    found = storage.read_versioned(storage.join(directory, workdir_lock.LOCK_NAME))
    if found is None:
        return None
    holder = workdir_lock._holder_of(found[0])
    return {} if isinstance(holder, str) else holder
