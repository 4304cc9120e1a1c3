"""Files by name, on a local disk or in a bucket (`gs://bucket/key`, `s3://...` with `s3fs`): the
one package that opens, lists and publishes them. URLs go to fsspec's gcsfs (s3fs) through
etils.epath, as Orbax's checkpoint metadata does: one client, one set of credentials and one
retry budget for both. What it writes is published whole or not at all. No JAX import: data_prep
uses it. What stands in for what a bucket lacks, and the user's view: docs/scaling.md, "Buckets
(gs:// and s3://)".

Callers import the package (`from bert_jax import storage`; `storage.open_read(...)`); its
modules, by concern:
    paths.py      local path or URL, parsed once (parse); join, dirname, basename
    remote.py     the bucket clients: their settings and the one retry budget
    errors.py     the clients' errors in a local path's words: NotFound, AccessDenied,
                  Unavailable
    checks.py     what is wrong with a path, asking the server: before anything is read or
                  written (check_paths, not_a_file), around an Orbax call (checkpoint_errors)
                  and when a binary ends on a bucket's error (report)
    files.py      reading, listing and writing (published whole or not at all), create-if-absent
                  and versioned reads for locks
    cache.py      local copies of bucket files (local_copy, local_copies, local_dir) and
                  their errors in the user's path (reported_as)
    workdir_lock.py  one run per directory it writes (a workdir, an export, data_prep's output):
                  imported as a module, `from bert_jax.storage import workdir_lock`
"""

# The package's names (callers import the package, not its modules).
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
    NotFound,
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
    CHECKPOINT_SCHEMES,
    StorageError,
    basename,
    checkpoint_problem,
    checkpoints_refused,
    dirname,
    expand,
    is_url,
    join,
    parse,
    real_path,
)
from bert_jax.storage.remote import RETRY_S, _fs, forget_listings, tensorstore_retries
