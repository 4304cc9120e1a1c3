"""Reading, listing and writing files by name, local or in a bucket: each published whole or not at
all (`open_write`, `write_bytes`), or created only where absent (`create_exclusive`, for locks):
docs/scaling.md, "Buckets (gs:// and s3://)"."""

import base64
import contextlib
import datetime
import glob as glob_lib
import hashlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator

from bert_jax.storage.errors import NotFound
from bert_jax.storage.paths import StorageError, basename, bucket_and_key, is_url
from bert_jax.storage.remote import _fs, _named

_CHUNK = 1 << 20


def open_read(path: str, mode: str = "rb", block_size: int | None = None, encoding: str = "utf-8"):
    """A file object for reading; a remote one reads `block_size` ahead and, opened "rb", is an
    io.BufferedReader, as a local one is (fsspec's own readline() has no size limit)."""
    encoding = None if "b" in mode else encoding
    if not is_url(path):
        return open(path, mode, encoding=encoding)
    sized = {"block_size": block_size} if block_size else {}
    f = _fs(path).open(path, mode, encoding=encoding, **sized)
    return io.BufferedReader(f, _CHUNK) if mode == "rb" else f


def read_bytes(path: str) -> bytes:
    if not is_url(path):
        with open(path, "rb") as f:
            return f.read()
    return _fs(path).cat_file(path)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def url_kind(path: str) -> str | None:
    """ "file", "directory" (a bucket, or a prefix of some object) or None; unlike fsspec's isfile
    and isdir, which answer False for any error, a refusal or an outage is raised."""
    try:
        return _fs(path).info(path).get("type")
    except NotFound:
        return None


def exists(path: str) -> bool:
    return url_kind(path) is not None if is_url(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """A local directory, a bucket or a prefix of some object (a bucket has no empty ones)."""
    return url_kind(path) == "directory" if is_url(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    return url_kind(path) == "file" if is_url(path) else os.path.isfile(path)


def listdir(path: str) -> list[str]:
    """The names directly under `path`, sorted (a bucket prefix's objects and sub-prefixes)."""
    if not is_url(path):
        return sorted(os.listdir(path))
    return sorted(basename(p) for p in _fs(path, fresh=True).ls(path, detail=False) if basename(p))


def glob(pattern: str) -> list[str]:
    """The paths that match `pattern`, sorted; URLs come back as URLs."""
    if not is_url(pattern):
        return sorted(glob_lib.glob(pattern))
    scheme = pattern.partition("://")[0]
    fs = _fs(pattern)
    fs.invalidate_cache()
    return sorted(f"{scheme}://{p}" for p in fs.glob(pattern))


def size(path: str) -> int:
    return int(_fs(path).info(path)["size"]) if is_url(path) else os.path.getsize(path)


def version(path: str) -> tuple[int, str]:
    """(size, version) of a file, asked now; every write of it gives another version (GCS's
    generation, S3's ETag, a local file's inode and mtime)."""
    if not is_url(path):
        st = os.stat(path)
        return st.st_size, _local_version(st)
    info = _fs(path, fresh=True).info(path)
    found = info.get("generation") or info.get("VersionId") or info.get("ETag")
    return int(info["size"]), str(found).strip('"')


def _local_version(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_mtime_ns}"


def modified(path: str) -> float:
    """When `path` was last written, in seconds since the epoch (an object: by the server)."""
    if not is_url(path):
        return os.stat(path).st_mtime
    info = _fs(path, fresh=True).info(path)
    when = info.get("mtime") or info.get("LastModified")
    if isinstance(when, str):
        when = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
    return when.timestamp()


def sizes(path: str) -> dict[str, int]:
    """{name: size} of the files directly under `path` ({} if none): one request per bucket."""
    try:
        if not is_url(path):
            return {e.name: e.stat().st_size for e in os.scandir(path) if e.is_file()}
        listed = _fs(path, fresh=True).ls(path, detail=True)
    except FileNotFoundError:
        return {}
    return {basename(e["name"]): int(e["size"]) for e in listed if e.get("type") == "file"}


def md5(path: str) -> str:
    """The md5 of a file in hex; for a GCS object the server's, where it has one (no download)."""
    stored = _fs(path).info(path).get("md5Hash") if is_url(path) else None
    if stored:
        return base64.b64decode(stored).hex()
    digest = hashlib.md5()
    with open_read(path) as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def makedirs(path: str) -> None:
    """A local directory and its parents; nothing for a URL (a prefix exists once it holds one)."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)


def _local_tmp(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def open_write(path: str, mode: str = "wb") -> Iterator:
    """A file object whose content appears under `path` whole when the block ends without an
    error, and never otherwise: written under a temporary name (manifest.TEMPORARY), then renamed,
    or to a local file, then uploaded."""
    encoding = None if "b" in mode else "utf-8"
    if not is_url(path):
        tmp = _local_tmp(path)
        try:
            with open(tmp, mode, encoding=encoding) as f:
                yield f
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        return
    with tempfile.TemporaryDirectory(prefix="bert_jax_upload_") as local_dir:
        local = os.path.join(local_dir, basename(path))
        with open(local, mode, encoding=encoding) as f:
            yield f
        _fs(path).put_file(local, path)


def write_bytes(path: str, data: bytes) -> None:  # published whole, as open_write's
    if not is_url(path):
        with open_write(path) as f:
            f.write(data)
        return
    _fs(path).pipe_file(path, data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # gone already: what the caller wants
        if is_url(path):
            _fs(path).rm_file(path)
        else:
            os.remove(path)


def move(src: str, dst: str) -> None:
    """Renames a file or directory; in a bucket each object is copied, then deleted, so callers
    first take away what marks `src` finished (a move cut short leaves both)."""
    if not is_url(src):
        os.rename(src, dst)
        return
    fs = _fs(src)
    fs.invalidate_cache()
    fs.copy(src.rstrip("/"), dst.rstrip("/"), recursive=True)
    rmtree(src)


def rmtree(path: str) -> None:
    """`path` and everything under it; nothing if it is not there."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    fs = _fs(path)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path, recursive=True)
    fs.invalidate_cache()


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates `path` holding `data` if nothing is there, atomically (O_EXCL, GCS's
    ifGenerationMatch=0, S3's If-None-Match: *): True if this call created it."""
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
    """Refuses an S3 store that ignores If-None-Match: two writers could both create."""
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
    """(content, `version`) of `path`, or None if it is not there."""
    try:
        if not is_url(path):
            with open(path, "rb") as f:
                return f.read(), _local_version(os.fstat(f.fileno()))
        found = version(path)[1]  # first: a replacement in between shows as a newer version
        return _fs(path).cat_file(path), found
    except FileNotFoundError:
        return None
