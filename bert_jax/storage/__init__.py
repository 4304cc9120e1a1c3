"""Files by name, on a local disk or in a bucket: the one package that opens, lists and publishes
them, so every path a user gives may be `gs://bucket/key` (Google Cloud Storage) or `s3://...`
(S3, with `s3fs` installed) as well as a local path.

Local paths go to the os module. URLs go to fsspec's `gcsfs` (`s3fs`) through etils.epath: the layer
Orbax itself uses for a checkpoint's metadata files, so our files and Orbax's share one client, one
set of credentials and one retry policy (Orbax writes the arrays through TensorStore, which this
package points at the same endpoint).

What an object store lacks, and what stands in for it here:
  * no rename. A local file is written under a temporary name and renamed (`write_bytes`,
    `open_write`); an object becomes visible only when its upload is finalized, so an upload
    that dies (kill -9, a lost connection) leaves nothing under the name. `open_write` writes an
    object to a local temporary file and uploads it when the writer's block ends without an
    error (nothing is uploaded when it raises), as one operation that can be tried again.
    "Finished" is then said by a small object written last (data_prep's manifest.json, Orbax's
    commit marker), never by a name appearing (a directory of files, an export: see
    bert_jax.hf.publish). `move` copies and deletes, so its callers first delete what marks the
    source finished.
  * no O_EXCL. `create_exclusive` uses GCS's ifGenerationMatch=0 precondition (the object is
    created only if no live object has that name), S3's If-None-Match: *; `read_versioned`
    returns an object with its generation (S3: ETag), for taking over a stale lock
    (bert_jax.training.workdir_lock).
  * no mtime to trust: `version` is an object's generation (S3: ETag), which every write of the
    name changes.
  * no random access for C++ readers (ArrayRecord's Riegeli reader opens local files only):
    `local_copy` fetches a file once into a cache directory, checked against the size and md5
    the caller expects, under a temporary name renamed when whole (`local_copies`: many at once;
    `local_dir`: a directory's files under their own names, for transformers and safetensors).
  * listings cached per process by gcsfs: `listdir` and `glob` refresh them; `forget_listings`
    for a reader that lists through another library (Orbax's step listing).

Credentials, another endpoint (STORAGE_EMULATOR_HOST), the path checks (`check_paths`), the
errors in a local path's words (errors.py) and the one retry budget (remote.py) are described
for users in docs/scaling.md ("Credentials", "Paths", "Errors", "Faults"). Nothing half-written
is trusted afterwards: see above.

No JAX import: data_prep uses this package.

Callers import the package (`from bert_jax import storage`; `storage.open_read(...)`); its
modules, by concern:
    paths.py      local path or URL, parsed once (parse, check_paths); join, dirname, basename
    remote.py     the bucket clients: settings, the one retry budget, whether a bucket exists
    errors.py     the clients' errors in a local path's words: NotFound, AccessDenied, Unavailable
    checks.py     what is wrong with a path, before anything is read or written (check_paths,
                  not_a_file) and when a binary ends on a bucket's error (report)
    files.py      reading, listing and writing (published whole or not at all)
    checkpoint_errors.py  Orbax's and TensorStore's errors in those words (checkpoint_errors)
    exclusive.py  create-if-absent and delete-if-unchanged, for locks
    cache.py      local copies of bucket files (local_copy, local_copies, local_dir) and
                  their errors in the user's path (reported_as)
"""

from bert_jax.storage.cache import (  # noqa: F401 (the package's names)
    default_cache_dir,
    local_copies,
    local_copy,
    local_dir,
    rename_in_error,
    reported_as,
)
from bert_jax.storage.checkpoint_errors import (  # noqa: F401 (the package's names)
    checkpoint_errors,
    classify,
    looks_like_storage,
    readable,
)
from bert_jax.storage.checks import (  # noqa: F401 (the package's names)
    bucket_exists,
    check_bucket,
    check_file,
    check_paths,
    not_a_file,
)
from bert_jax.storage.errors import (  # noqa: F401 (the package's names)
    AccessDenied,
    NotFound,
    Unavailable,
    unavailable_as_user_error,
    unavailable_message,
)
from bert_jax.storage.exclusive import (  # noqa: F401 (the package's names)
    create_exclusive,
    read_versioned,
)
from bert_jax.storage.files import (  # noqa: F401 (the package's names)
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
    remove,
    rmtree,
    size,
    sizes,
    version,
    write_bytes,
    write_text,
)
from bert_jax.storage.paths import (  # noqa: F401 (the package's names)
    CHECKPOINT_SCHEMES,
    SCHEMES,
    StorageError,
    basename,
    bucket_and_key,
    checkpoints_refused,
    dirname,
    expand,
    is_url,
    join,
    parse,
)
from bert_jax.storage.remote import (  # noqa: F401 (the package's names)
    REQUEST_TIMEOUT_S,
    RETRY_S,
    _fs,
    configure,
    forget_listings,
    retry_seconds,
    tensorstore_retries,
)
