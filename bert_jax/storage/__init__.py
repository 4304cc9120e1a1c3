"""Files by name, local or in a bucket (gs://, s3://), through the fsspec clients Orbax uses: one
client, one set of credentials, one retry budget; what it writes is published whole or not at
all. Callers import the package, and workdir_lock (one run per directory) as a module. Modules:
paths, remote (the clients and the budget), errors (theirs in a local path's words), checks
(asking the server), files, cache (local copies). No JAX import. docs/scaling.md, "Buckets"."""

# ruff: noqa: F401
from bert_jax.storage.cache import local_copies, local_copy, local_dir, rename_in_error, reported_as
from bert_jax.storage.checks import (
    check_bucket,
    check_file,
    check_paths,
    checkpoint_errors,
    classify,
    looks_like_storage,
    not_a_file,
    readable,
)
from bert_jax.storage.errors import (
    AccessDenied,
    Unavailable,
    unavailable_as_user_error,
    unavailable_message,
)
from bert_jax.storage.files import (
    create_exclusive,
    exists,
    glob,
    isdir,
    isfile,
    listdir,
    makedirs,
    md5,
    modified,
    move,
    open_read,
    open_write,
    read_bytes,
    read_text,
    read_versioned,
    remove,
    rmtree,
    size,
    sizes,
    version,
    write_bytes,
    write_text,
)
from bert_jax.storage.paths import (
    StorageError,
    basename,
    checkpoint_problem,
    dirname,
    expand,
    is_url,
    join,
    parse,
    real_path,
)
from bert_jax.storage.remote import RETRY_S, _fs, forget_listings, tensorstore_retries
