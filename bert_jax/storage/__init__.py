"""Files by name, on a local disk or in a bucket (gs://, s3:// with s3fs), through etils.epath's
fsspec clients as Orbax uses them: one client, one set of credentials, one retry budget. What it
writes is published whole or not at all. No JAX import: data_prep uses it. Callers import the
package (`storage.open_read(...)`); workdir_lock (one run per directory it writes) as a module.
Its modules: paths (parse, join), remote (the clients and the retry budget), errors (theirs in a
local path's words), checks (asking the server what is wrong with a path), files (read, list,
write), cache (local copies). docs/scaling.md, "Buckets (gs:// and s3://)".
"""

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
