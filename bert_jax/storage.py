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
    that dies (kill -9, a lost connection) leaves nothing under the name, and `open_write`
    discards the upload, instead of finalizing a partial object, when the writer raises.
    "Finished" is then said by a small object written last (data_prep's manifest.json, Orbax's
    commit marker), never by a name appearing. A directory of files (an export) is published by
    `publish_dir`: the file a reader opens first is deleted first and uploaded last. `move`
    copies and deletes, so its callers first delete what marks the source finished.
  * no O_EXCL. `create_exclusive` uses GCS's ifGenerationMatch=0 precondition (the object is
    created only if no live object has that name); `read_versioned` and `delete_if_version`
    compare-and-delete by generation, for taking over a stale lock.
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

Faults: gcsfs retries server errors (5xx, 408, 429) and dropped connections 6 times with
exponential backoff (about 1, 2, 4, 8, 16, 32 s plus jitter), and a request that gets no answer
within REQUEST_TIMEOUT_S is such a failure too; TensorStore is held to the same budget
(TENSORSTORE_RETRIES, applied to Orbax by bert_jax.checkpointing). When the retries are spent,
`unavailable_message` turns the error into one `error:` line (cli.run asks it), never a
traceback. Nothing half-written is trusted afterwards: see above.

No JAX import: data_prep uses this module.
"""

import base64
import contextlib
import hashlib
import io
import json
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
# A request that gets no byte back for this long is retried (a stalled server or proxy).
REQUEST_TIMEOUT_S = 60
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
    """The fsspec file system of a URL: the instance etils.epath (and so Orbax) uses too."""
    configure()
    from etils.epath import backend

    return backend.fsspec_backend.fs(path)


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


def open_read(path: str, mode: str = "rb", encoding: str = "utf-8"):
    """A file object for reading, local or remote (remote ones read ahead in blocks and seek);
    text mode decodes with `encoding`."""
    encoding = None if "b" in mode else encoding
    if not is_url(path):
        return open(path, mode, encoding=encoding)
    return _fs(path).open(path, mode, encoding=encoding)


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


def size(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    return int(_fs(path).info(path)["size"])


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
    bert_jax.manifest.TEMPORARY) and renamed; an upload is finalized on success and cancelled on
    an error (a killed process never finalizes it)."""
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
    f = _fs(path).open(path, mode, encoding=encoding)
    try:
        yield f
    except BaseException:
        _discard(f)
        raise
    f.close()


def _discard(f) -> None:
    """Cancels an unfinished upload (fsspec's text wrapper hides the buffered file). Marked
    closed too: gcsfs would otherwise finish the upload when the object is collected, publishing
    the part written so far under the final name."""
    raw = f.buffer if isinstance(f, io.TextIOWrapper) else f
    with contextlib.suppress(Exception):
        raw.discard()
    raw.buffer = None
    raw.closed = True


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


# What an export directory of ours lists its files in: bert_jax.publish.MARKER, the rule for
# local exports (the runs branch): a directory is new, empty or an earlier export of ours, which
# is replaced whole; files we did not write are refused, never deleted.
EXPORT_MARKER = ".bert_jax_export.json"


def published_files(path: str, flag: str = "--output_dir") -> list[str]:
    """The files of the earlier export of ours in the bucket directory `path` ([] if nothing
    is there); a directory holding anything else is refused (StorageError naming the files)."""
    if not isdir(path):
        return []
    names = [n for n in listdir(path) if n != EXPORT_MARKER]
    listed: list[str] = []
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        listed = list(json.loads(read_text(join(path, EXPORT_MARKER)))["files"])
    foreign = [n for n in names if n not in listed]
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise StorageError(
            f"{flag}={path!r} holds files that are not an export of ours ({shown}); pass a new "
            "or empty directory (an earlier export of ours there is replaced whole)"
        )
    return names


def _write_export_marker(path: str, files: list[str], complete: bool) -> None:
    record = {"files": sorted(files), "complete": complete, "written": time.time()}
    write_text(join(path, EXPORT_MARKER), json.dumps(record))


def publish_dir(local: str, path: str, last: str, flag: str = "--output_dir") -> None:
    """The files of the local directory `local` published as the bucket directory `path`, which
    must be new, empty or an earlier export of ours (`published_files`), replaced whole: its
    marker first lists both versions' files as incomplete; `path/last` (the file a reader opens
    first: a Hugging Face model's config.json) is deleted, the new files uploaded, the old
    version's other files deleted, `last` uploaded, and the marker rewritten. A publish cut
    short leaves a directory a reader refuses (no `last`), never two models' files under a
    complete-looking one, and the next publish replaces it whole."""
    names = sorted(os.listdir(local))
    if last not in names:
        raise ValueError(f"{local} has no {last} to publish last")
    old = published_files(path, flag)
    _write_export_marker(path, sorted(set(old) | set(names)), complete=False)
    remove(join(path, last))
    for name in names:
        if name != last:
            with open(os.path.join(local, name), "rb") as f, open_write(join(path, name)) as out:
                shutil.copyfileobj(f, out, _CHUNK)
    for name in sorted(set(old) - set(names)):
        if isdir(join(path, name)):
            rmtree(join(path, name))
        else:
            remove(join(path, name))
    with open(os.path.join(local, last), "rb") as f:
        write_bytes(join(path, last), f.read())
    _write_export_marker(path, names, complete=True)


@contextlib.contextmanager
def staged_dir(path: str, last: str) -> Iterator[str]:
    """A local directory to write the files of directory `path` into: `path` itself when it is
    local; for a bucket a temporary directory, published with `publish_dir` when the block ends
    without an error (and removed)."""
    if not is_url(path):
        makedirs(path)
        yield path
        return
    published_files(path)  # refused before any work, not after it
    with tempfile.TemporaryDirectory(prefix="bert_jax-publish-") as local:
        yield local
        publish_dir(local, path, last)


# --- Exclusive creation, for locks ----------------------------------------------------------


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates `path` holding `data` if nothing is there, atomically: True if this call created
    it, False if it existed. Locally O_CREAT|O_EXCL (on NFS v3 and later too); on GCS the
    ifGenerationMatch=0 precondition, which the server checks."""
    if not is_url(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    if not path.startswith("gs://"):
        raise StorageError(f"{path}: exclusive creation (run locks) is supported on gs:// only")
    try:
        _fs(path).pipe_file(path, data, mode="create")
    except FileExistsError:
        return False
    return True


def read_versioned(path: str) -> tuple[bytes, str] | None:
    """(content, version) of `path`, or None if it is not there. The version changes whenever
    the file is replaced: a GCS object's generation, a local file's inode and mtime."""
    try:
        if not is_url(path):
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                return f.read(), f"{st.st_ino}:{st.st_mtime_ns}"
        fs = _fs(path)
        fs.invalidate_cache(path)
        info = fs.info(path)
        return fs.cat_file(path), str(info["generation"])
    except FileNotFoundError:
        return None


def delete_if_version(path: str, version: str) -> bool:
    """Deletes `path` only if it is still the version `read_versioned` returned: True if this
    call deleted it. On GCS the server checks (ifGenerationMatch; fake-gcs-server ignores that
    precondition on deletes, so a protocol must not rest on this call alone: create_exclusive is
    the one primitive every server checks); locally the check and the delete are two steps,
    which is as good as a local file system offers."""
    if not is_url(path):
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
    target = os.path.join(cache_dir or default_cache_dir(), bucket, f"{key}.{tag[:16]}")
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


def unavailable_message(error: BaseException) -> str | None:
    """The one line for an error of the bucket clients that retries could not get past (the
    server down, 5xx answers, stalls, refused credentials), or None if `error` is not one."""
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
