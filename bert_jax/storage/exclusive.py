"""Creating a file only if it is absent and deleting it only if it is the version read, local or in
a bucket (GCS generation preconditions, S3 conditional writes): what bert_jax.training.workdir_lock
builds on."""

import os

from bert_jax.storage.files import version
from bert_jax.storage.paths import StorageError, bucket_and_key, is_url
from bert_jax.storage.remote import _fs, _named


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates `path` holding `data` if nothing is there, atomically: True if this call created
    it, False if it existed. Locally O_CREAT|O_EXCL (on NFS v3 and later too); on GCS the
    ifGenerationMatch=0 precondition, which the server checks; on S3 If-None-Match: *, which AWS
    S3 checks since 2024 but some S3-compatible stores ignore: a bucket is first probed once, and
    one that ignores it is a StorageError."""
    if not is_url(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:  # a full disk: no empty file left for others to puzzle over
            os.remove(path)
            raise
        return True
    if path.startswith("s3://"):
        _check_conditional_writes(path)
    fs, tries = _fs(path)._fs, []

    def create():
        tries.append(None)
        fs.pipe_file(path, data, mode="create")

    try:
        _named(create, path)()  # tried on the budget; no bucket, no credentials: named by path
    except FileExistsError:
        # A try that timed out may have created the object before the next one found it there.
        found = read_versioned(path) if len(tries) > 1 else None
        return found is not None and found[0] == data
    return True


_CONDITIONAL_WRITES: dict[str, bool] = {}


def _check_conditional_writes(path: str) -> None:
    """Refuses an S3 store that ignores If-None-Match (it would let two writers both create):
    a probe object is created twice, once per bucket and process."""
    bucket = bucket_and_key(path)[0]
    if bucket not in _CONDITIONAL_WRITES:
        fs = _fs(path)
        probe = f"s3://{bucket}/.bert_jax-conditional-write-probe-{os.getpid()}"
        _named(fs._fs.pipe_file, path)(probe, b"1", mode="create")
        try:
            fs._fs.pipe_file(probe, b"2", mode="create")
            _CONDITIONAL_WRITES[bucket] = False
        except FileExistsError:
            _CONDITIONAL_WRITES[bucket] = True
        finally:
            fs.rm_file(probe)
    if not _CONDITIONAL_WRITES[bucket]:
        raise StorageError(
            f"{path}: this S3 store ignores conditional writes (If-None-Match), so no lock can "
            "keep two jobs from writing one directory; use gs://, AWS S3 or a local directory"
        )


def read_versioned(path: str) -> tuple[bytes, str] | None:
    """(content, version) of `path`, or None if it is not there. The version changes whenever
    the file is replaced: a GCS object's generation, an S3 object's ETag, a local file's inode
    and mtime."""
    try:
        if not is_url(path):
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), f"{st.st_ino}:{st.st_mtime_ns}"
        found = version(path)[1]  # first: a replacement in between shows as a newer version
        return _fs(path).cat_file(path), found
    except FileNotFoundError:
        return None
