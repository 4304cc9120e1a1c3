"""Files by name, on a local disk or in a bucket: the one module that opens, lists and publishes
them, so every path a user gives may be `gs://bucket/key` (Google Cloud Storage) or `s3://...`
(S3, with `s3fs` installed) as well as a local path.

Local paths go to the os module, exactly as before. URLs go to fsspec's `gcsfs` (`s3fs`) through
etils.epath: the layer Orbax itself uses for a checkpoint's metadata files, so our files and
Orbax's share one client, one set of credentials and one retry policy (Orbax writes the arrays
through TensorStore, which this module points at the same endpoint).

What an object store lacks, and what stands in for it here:
  * no rename. A local file is written under a temporary name and renamed (`write_bytes`,
    `open_write`); an object becomes visible only when its upload is finalized, so an upload
    that dies (kill -9, a lost connection) leaves nothing under the name. `open_write` writes an
    object to a local temporary file and uploads it when the writer's block ends without an
    error (nothing is uploaded when it raises), as one operation that can be tried again.
    "Finished" is then said by a small object written last (data_prep's manifest.json, Orbax's
    commit marker), never by a name appearing (a directory of files, an export: see
    bert_jax.publish). `move` copies and deletes, so its callers first delete what marks the
    source finished.
  * no O_EXCL. `create_exclusive` uses GCS's ifGenerationMatch=0 precondition (the object is
    created only if no live object has that name), S3's If-None-Match: *; `read_versioned` and
    `delete_if_version` compare-and-delete by generation (S3: ETag, check then delete), for
    taking over a stale lock.
  * no mtime to trust: `version` is an object's generation (S3: ETag), which every write of the
    name changes.
  * no random access for C++ readers (ArrayRecord's Riegeli reader opens local files only):
    `local_copy` fetches a file once into a cache directory, checked against the size and md5
    the caller expects, under a temporary name renamed when whole (`local_copies`: many at once;
    `local_dir`: a directory's files under their own names, for transformers and safetensors).
  * listings cached per process by gcsfs: `listdir` and `glob` refresh them; `forget_listings`
    for a reader that lists through another library (Orbax's step listing).

Credentials: Application Default Credentials, as every Google client library: on a Cloud TPU or
GCE VM the VM's service account, elsewhere `gcloud auth application-default login` or
GOOGLE_APPLICATION_CREDENTIALS. Another endpoint (an emulator such as fake-gcs-server, a
proxy): set STORAGE_EMULATOR_HOST=http://host:port; gcsfs reads it, and `configure` hands it to
TensorStore as TENSORSTORE_GCS_HTTP_URL (with anonymous access) unless that is set already.

Faults: gcsfs retries server errors (5xx, 408, 429) and refused or dropped connections 6 times
with exponential backoff (about 1, 2, 4, 8, 16 s plus jitter: ~31 s), but not a request that
gets no answer within REQUEST_TIMEOUT_S (a stalled server or proxy), and a server gone for a
minute outlasts its retries. So every operation of this module is tried again, whole, on such
a transient error (`_transient`), with backoff up to 30 s, until BERT_JAX_STORAGE_RETRY_S
(default RETRY_S) have passed since its first try; a write is an upload of a local temporary
file, so it too is one operation that can be tried again. TensorStore, which writes Orbax's
arrays, retries by itself, held to gcsfs' budget (TENSORSTORE_RETRIES, applied by
bert_jax.checkpointing). When the retries are spent,
`unavailable_message` turns the error into one `error:` line (cli.run asks it), never a
traceback. Nothing half-written is trusted afterwards: see above.

No JAX import: data_prep uses this module.
"""

import base64
import contextlib
import hashlib
import io
import logging
import os
import posixpath
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

from bert_jax import cli

SCHEMES = ("gs", "s3")
# A request that gets no answer for this long is tried again (a stalled server or proxy).
REQUEST_TIMEOUT_S = 60
# How long an operation is tried again while the server fails it transiently (env
# BERT_JAX_STORAGE_RETRY_S): long enough for a server restarting or a network blip, short enough
# that a bucket that is really gone ends the job with its error line within minutes.
RETRY_S = 300.0
# TensorStore's GCS retries (its context resource gcs_request_retries), set to gcsfs' budget:
# TensorStore's own default (32 tries, up to 32 s apart) keeps a save waiting ~15 minutes on a
# bucket that is gone, long after gcsfs has given up on the same save's metadata files.
TENSORSTORE_RETRIES = {"max_retries": 6, "initial_delay": "1s", "max_delay": "32s"}
_CHUNK = 1 << 20


class StorageError(cli.UserError):
    """A bucket path that cannot be used as given (unknown scheme, a bucket that is not there)."""


def is_url(path: str) -> bool:
    """Whether `path` names an object in a bucket (gs://, s3://) rather than a local file."""
    scheme, sep, _ = str(path).partition("://")
    if not sep:
        return False
    if scheme not in SCHEMES:
        raise StorageError(
            f"{path}: {scheme}:// paths are not supported; use a local path, gs:// or s3://"
        )
    return True


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def dirname(path: str) -> str:
    if is_url(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
    return posixpath.basename(str(path).rstrip("/"))


def expand(path: str) -> str:
    """A user's path as this module takes it: `~` expanded for local paths, URLs as given."""
    return path if is_url(path) else os.path.expanduser(path)


# --- The remote side ------------------------------------------------------------------------


_configured = False


def configure() -> None:
    """Settings for the bucket clients, read from the environment once, before the first URL is
    touched (gcsfs reads GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT when it is imported)."""
    global _configured
    if _configured:
        return
    # gcsfs >= 2026.1 first asks a gRPC control-plane API what kind of bucket it is talking to
    # (zonal / hierarchical-namespace buckets); against anything but the real service that call
    # waits 60 s per bucket and every operation then falls back to the JSON API we use anyway.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import fsspec

    gcs = fsspec.config.conf.setdefault("gcs", {})
    gcs.setdefault("requests_timeout", REQUEST_TIMEOUT_S)
    # gcsfs logs a traceback of every request it gives up on; unavailable_message reports it.
    logging.getLogger("gcsfs").setLevel(logging.CRITICAL)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        gcs.setdefault("token", "anon")
        os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", emulator)
        # TensorStore sends this as the bearer token instead of looking for credentials.
        os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    _configured = True


def _fs(path: str):
    """The fsspec file system of a URL (the instance etils.epath, and so Orbax, uses too), with
    every method call tried again on transient errors (`_Retrying`)."""
    configure()
    from etils.epath import backend

    return _Retrying(backend.fsspec_backend.fs(path))


def retry_seconds() -> float:
    return float(os.environ.get("BERT_JAX_STORAGE_RETRY_S", RETRY_S))


def _transient(error: BaseException) -> bool:
    """An error a later try may not meet: a timeout, a refused or dropped connection, a 5xx,
    408 or 429 answer (what gcsfs retries, and the timeouts it does not)."""
    if isinstance(error, (TimeoutError, ConnectionError)):  # fsspec's FSTimeoutError too
        return True
    with contextlib.suppress(ImportError):
        import aiohttp

        if isinstance(error, aiohttp.ClientResponseError):
            return error.status >= 500 or error.status in (408, 429)
        if isinstance(error, aiohttp.ClientError):
            return True
    with contextlib.suppress(ImportError):
        from gcsfs.retry import HttpError

        if isinstance(error, HttpError):
            return error.code in (408, 429) or 500 <= (error.code or 0) < 600
    return False


def _retrying(call, *args, **kwargs):
    """call(*args, **kwargs), tried again on transient errors until retry_seconds() have passed
    (the clients' own retries come first: each try may take ~31 s against a server that is
    down)."""
    deadline = time.monotonic() + retry_seconds()
    delay = 1.0
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as e:
            if not _transient(e) or time.monotonic() + delay > deadline:
                raise
            logging.warning(
                "storage: %s (%s); trying again in %.0f s",
                type(e).__name__,
                " ".join(str(e).split())[:200],
                delay,
            )
            time.sleep(delay)
            delay = min(2 * delay, 30.0)


class _Retrying:
    """A file system whose method calls are `_retrying`; files opened for reading fetch their
    blocks through `_retrying` too."""

    def __init__(self, fs):
        self._fs = fs

    def __getattr__(self, name):
        attribute = getattr(self._fs, name)
        if not callable(attribute) or name in ("invalidate_cache", "open"):
            return attribute
        return lambda *args, **kwargs: _retrying(attribute, *args, **kwargs)

    def open(self, path, mode="rb", **kwargs):
        f = _retrying(self._fs.open, path, mode, **kwargs)
        cache = getattr(f, "buffer", f).cache if "r" in mode else None
        if cache is not None and getattr(cache, "fetcher", None) is not None:
            fetch = cache.fetcher
            cache.fetcher = lambda start, end: _retrying(fetch, start, end)
        return f


def forget_listings(path: str) -> None:
    """Drops what this process's client remembers of the listings under `path` (gcsfs caches
    them): for a reader about to list what another process may have written since, such as
    Orbax listing a workdir's steps. Nothing for a local path."""
    if is_url(path):
        _fs(path).invalidate_cache()


def _bucket_and_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("://")[2].partition("/")
    return bucket, key


# --- Reading --------------------------------------------------------------------------------


def open_read(path: str, mode: str = "rb", block_size: int | None = None, encoding: str = "utf-8"):
    """A file object for reading, local or remote (remote ones read ahead in blocks and seek;
    `block_size`: how far past a read, the client's default, 5 MB for GCS, when None); text
    mode decodes with `encoding`. A remote binary file is an io.BufferedReader, as a local one:
    fsspec's own file has a readline() without a size limit, that scans its blocks a piece at a
    time."""
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


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    return _fs(path).exists(path)


def isdir(path: str) -> bool:
    """A local directory, or a bucket prefix under which some object lies (a bucket has no empty
    directories) or a bucket itself."""
    if not is_url(path):
        return os.path.isdir(path)
    return _fs(path).isdir(path)


def isfile(path: str) -> bool:
    if not is_url(path):
        return os.path.isfile(path)
    return _fs(path).isfile(path)


def listdir(path: str) -> list[str]:
    """The names directly under `path`, sorted (a bucket prefix's objects and sub-prefixes)."""
    if not is_url(path):
        return sorted(os.listdir(path))
    fs = _fs(path)
    fs.invalidate_cache(path)  # another process may have written since (a rerun, other hosts)
    return sorted(basename(p) for p in fs.ls(path, detail=False) if basename(p))


def glob(pattern: str) -> list[str]:
    """The paths that match `pattern`, sorted; URLs come back as URLs."""
    if not is_url(pattern):
        import glob as glob_lib

        return sorted(glob_lib.glob(pattern))
    scheme = pattern.partition("://")[0]
    fs = _fs(pattern)
    fs.invalidate_cache()
    return sorted(f"{scheme}://{p}" for p in fs.glob(pattern))


def not_a_file(path: str) -> str | None:
    """Why `path` is not a file to read, as words that follow its name (a local path: missing, a
    directory, a pipe, ...: cli.not_a_file; a URL: no such object), or None when it is one."""
    if is_url(path):
        return None if isfile(path) else "does not exist (no such object)"
    return None if os.path.isfile(path) else cli.not_a_file(path)


def check_file(path: str, what: str) -> None:
    """Raises cli.UserError "`what` 'path' <why>" unless `path` is a file to read."""
    why = not_a_file(path)
    if why:
        raise cli.UserError(f"{what} {path!r} {why}")


def size(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    return int(_fs(path).info(path)["size"])


def version(path: str) -> tuple[int, str]:
    """(size, version) of a bucket object, asked of the server now: the version is GCS's
    generation (a number the server gives each write of a name, never reused) or S3's ETag; a
    rewrite of the object gives another version."""
    fs = _fs(path)
    fs.invalidate_cache(path)
    info = fs.info(path)
    found = info.get("generation") or info.get("VersionId") or info.get("ETag")
    return int(info["size"]), str(found).strip('"')


def sizes(path: str) -> dict[str, int]:
    """{name: size} of the files directly under the directory or prefix `path` ({} when there is
    none): one listing request for a bucket, where a size per file would be one request each."""
    if not is_url(path):
        try:
            return {e.name: e.stat().st_size for e in os.scandir(path) if e.is_file()}
        except FileNotFoundError:
            return {}
    fs = _fs(path)
    fs.invalidate_cache(path)
    try:
        listed = fs.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    return {basename(e["name"]): int(e["size"]) for e in listed if e.get("type") == "file"}


def md5(path: str) -> str:
    """The md5 of a file in hex; for a GCS object the md5 the server computed at upload (no
    download), unless it has none (composite objects), then by reading it."""
    if is_url(path):
        info = _fs(path).info(path)
        stored = info.get("md5Hash")
        if stored:
            return base64.b64decode(stored).hex()
    digest = hashlib.md5()
    with open_read(path) as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


# --- Writing --------------------------------------------------------------------------------


def makedirs(path: str) -> None:
    """A local directory and its parents; nothing for a URL (a bucket prefix exists once an
    object is under it)."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)


def _local_tmp(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def open_write(path: str, mode: str = "wb") -> Iterator:
    """A file object whose content appears under `path` whole when the block ends without an
    error, and never otherwise: a local file is written under a temporary name (see
    bert_jax.manifest.TEMPORARY) and renamed; an object is written to a local temporary file
    and uploaded when the block ends without an error, an upload that is tried again whole on
    transient errors and that a killed process never finalizes."""
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


def write_bytes(path: str, data: bytes) -> None:
    """`data` under `path`, published whole (see open_write)."""
    if not is_url(path):
        with open_write(path) as f:
            f.write(data)
        return
    _fs(path).pipe_file(path, data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def remove(path: str, missing_ok: bool = True) -> None:
    try:
        if not is_url(path):
            os.remove(path)
        else:
            _fs(path).rm_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise


def move(src: str, dst: str) -> None:
    """Renames a file or directory. In a bucket there is no rename: every object is copied, then
    the originals deleted, so a move cut short leaves objects under both names (callers first
    take away what marks `src` finished, see bert_jax.checkpointing)."""
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


# --- Exclusive creation, for locks ----------------------------------------------------------


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
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    if path.startswith("s3://"):
        _check_conditional_writes(path)
    fs, tries = _fs(path)._fs, []

    def create():
        tries.append(None)
        fs.pipe_file(path, data, mode="create")

    try:
        _retrying(create)
    except FileExistsError:
        # A try that timed out may have created the object before the next one found it there.
        found = read_versioned(path) if len(tries) > 1 else None
        return found is not None and found[0] == data
    return True


_CONDITIONAL_WRITES: dict[str, bool] = {}


def _check_conditional_writes(path: str) -> None:
    """Refuses an S3 store that ignores If-None-Match (it would let two writers both create):
    a probe object is created twice, once per bucket and process."""
    bucket = _bucket_and_key(path)[0]
    if bucket not in _CONDITIONAL_WRITES:
        fs = _fs(path)
        probe = f"s3://{bucket}/.bert_jax-conditional-write-probe-{os.getpid()}"
        _retrying(fs._fs.pipe_file, probe, b"1", mode="create")
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
        found = version(path)[1]  # first: a replacement in between fails the compare-and-delete
        return _fs(path).cat_file(path), found
    except FileNotFoundError:
        return None


def delete_if_version(path: str, version: str) -> bool:
    """Deletes `path` only if it is still the version `read_versioned` returned: True if this
    call deleted it. On GCS the server checks (ifGenerationMatch; fake-gcs-server ignores that
    precondition on deletes, so a protocol must not rest on this call alone: create_exclusive is
    the one primitive every server checks); locally and on S3 the check and the delete are two
    steps, which is as good as a local file system offers."""
    if not path.startswith("gs://"):
        current = read_versioned(path)
        if current is None or current[1] != version:
            return False
        remove(path)
        return True
    fs = _fs(path)
    bucket, key = _bucket_and_key(path)
    try:
        fs.call("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=version, json_out=False)
    except (FileNotFoundError, FileExistsError):
        return False  # gone already, or replaced (412 Precondition Failed)
    except Exception as e:  # gcsfs raises HttpError for a 412 on DELETE
        if getattr(e, "code", None) == 412:
            return False
        raise
    fs.invalidate_cache(path)
    return True


# --- Local copies ---------------------------------------------------------------------------


def default_cache_dir() -> str:
    return os.environ.get(
        "BERT_JAX_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "bert_jax")
    )


def local_copy(
    path: str, cache_dir: str | None = None, md5_hex: str | None = None, nbytes: int | None = None
) -> str:
    """A local file with `path`'s content: `path` itself if it is local, else a copy under
    `cache_dir` (default BERT_JAX_CACHE_DIR or ~/.cache/bert_jax) fetched once and reused while
    the object's md5 is the same. The copy is written under a temporary name and renamed when
    whole and checked against `nbytes` and `md5_hex` (the manifest's figures) when given."""
    if not is_url(path):
        return path
    fs = _fs(path)
    info = fs.info(path)
    remote_md5 = base64.b64decode(info["md5Hash"]).hex() if info.get("md5Hash") else None
    want = md5_hex or remote_md5
    if md5_hex and remote_md5 and md5_hex != remote_md5:
        raise StorageError(
            f"{path} has md5 {remote_md5} but its manifest says {md5_hex}: the object was "
            "replaced or damaged after its manifest was written; rerun the job that wrote it"
        )
    bucket, key = _bucket_and_key(path)
    tag = want or str(info.get("generation") or info.get("ETag") or info["size"])
    # The version is a directory, so the copy keeps the object's name: readers tell a
    # SentencePiece .model from a vocab.txt by it.
    target = os.path.join(cache_dir or default_cache_dir(), bucket, tag.strip('"')[:16], key)
    if os.path.exists(target) and os.path.getsize(target) == int(info["size"]):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    digest = hashlib.md5()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, fs.open(path, "rb", block_size=8 * _CHUNK) as f:
            for block in iter(lambda: f.read(8 * _CHUNK), b""):
                digest.update(block)
                out.write(block)
        got = os.path.getsize(tmp)
        if nbytes is not None and got != nbytes:
            raise StorageError(
                f"{path}: {got} bytes fetched, its manifest says {nbytes}; the object was "
                "replaced or cut after its manifest was written"
            )
        if want and digest.hexdigest() != want:
            raise StorageError(
                f"{path}: the copy fetched has md5 {digest.hexdigest()}, expected {want}; "
                "rerun (a transfer error) or rewrite the file"
            )
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return target


def local_copies(
    paths: list[str],
    md5s: list[str] | None = None,
    nbytes: list[int | None] | None = None,
    cache_dir: str | None = None,
    threads: int = 8,
) -> list[str]:
    """`local_copy` of each path (local ones as they are), `threads` fetches at a time: a bucket
    serves one object at tens of MB/s but many at once at the link's rate."""
    md5s = md5s or [None] * len(paths)
    nbytes = nbytes or [None] * len(paths)
    if not any(is_url(p) for p in paths):
        return list(paths)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
        return list(
            pool.map(lambda a: local_copy(a[0], cache_dir, a[1], a[2]), zip(paths, md5s, nbytes))
        )


def local_dir(path: str, cache_dir: str | None = None) -> str:
    """A local directory holding the files directly under `path` (a Hugging Face model directory
    in a bucket, for transformers and safetensors, which open local files): `path` itself if it
    is local, else each file's `local_copy` linked under its own name into
    `<cache_dir>/<bucket>/<key>.dir/`. Files that are no longer under `path` are unlinked."""
    if not is_url(path):
        return path
    fs = _fs(path)
    fs.invalidate_cache(path)
    entries = [e for e in fs.ls(path, detail=True) if e["type"] == "file" and basename(e["name"])]
    scheme = path.partition("://")[0]
    copies = local_copies([f"{scheme}://{e['name']}" for e in entries], cache_dir=cache_dir)
    bucket, key = _bucket_and_key(path.rstrip("/"))
    target = os.path.join(cache_dir or default_cache_dir(), bucket, f"{key}.dir")
    os.makedirs(target, exist_ok=True)
    names = {basename(e["name"]) for e in entries}
    for name in set(os.listdir(target)) - names:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(target, name))
    for name, copy in zip((basename(e["name"]) for e in entries), copies):
        link = os.path.join(target, name)
        if os.path.exists(link) and os.path.samefile(link, copy):
            continue
        tmp = _local_tmp(link)
        try:
            os.link(copy, tmp)
        except OSError:  # another file system: a copy
            shutil.copyfile(copy, tmp)
        os.replace(tmp, link)
    return target


# --- Errors ---------------------------------------------------------------------------------


class Unavailable(StorageError):
    """A bucket that stayed unreachable through the retries, as one picklable error whose message
    is `unavailable_message`'s line (the clients' own errors do not all survive being sent from a
    worker process to its parent)."""


@contextlib.contextmanager
def unavailable_as_user_error() -> Iterator[None]:
    """Turns an error of the bucket clients that the retries could not get past into
    `Unavailable` (for worker processes, whose errors are pickled to the parent)."""
    try:
        yield
    except Exception as e:
        text = unavailable_message(e)
        if text is None or isinstance(e, Unavailable):
            raise
        raise Unavailable(text) from None


def unavailable_message(error: BaseException) -> str | None:
    """The one line for an error of the bucket clients that retries could not get past (the
    server down, 5xx answers, stalls, refused credentials), or None if `error` is not one."""
    if isinstance(error, Unavailable):
        return str(error)
    if "gcsfs" not in sys.modules and "s3fs" not in sys.modules:
        return None
    import asyncio

    kinds = [asyncio.TimeoutError, TimeoutError, ConnectionError]
    with contextlib.suppress(ImportError):
        import aiohttp

        kinds.append(aiohttp.ClientError)
    with contextlib.suppress(ImportError):
        from gcsfs.retry import HttpError

        kinds.append(HttpError)
    chain, seen = error, set()
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        # gcsfs reports an upload session the server no longer knows (404 on its upload_id:
        # the server restarted, or the session expired) as FileNotFoundError naming that URL.
        lost_upload = isinstance(chain, FileNotFoundError) and "upload_id=" in str(chain)
        # TensorStore (Orbax's array writes) raises ValueError once its retries are spent.
        tensorstore = isinstance(chain, ValueError) and "retry attempts failed" in str(chain)
        if lost_upload or tensorstore or isinstance(chain, tuple(kinds)):
            detail = " ".join(str(chain).split()) or type(chain).__name__
            return (
                f"the storage server did not serve the request after its retries ({detail}); "
                "finished work is kept and nothing half-written is used: rerun the same "
                "command when the bucket is reachable"
            )
        chain = chain.__cause__ or chain.__context__
    return None
