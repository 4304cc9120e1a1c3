"""Local copies of bucket files (in $BERT_JAX_CACHE_DIR, ~/.cache/bert_jax), for readers of local
files only (ArrayRecord's C++ reader, transformers)."""

import base64
import contextlib
import hashlib
import itertools
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor

from bert_jax.storage.files import _CHUNK, _local_tmp
from bert_jax.storage.paths import StorageError, basename, bucket_and_key, is_url
from bert_jax.storage.remote import _fs


def rename_in_error(error: BaseException, local: str, path: str) -> bool:
    """Rewrites `error` in place to name `path` where it names `local`; True if it did."""
    if local == path:
        return False
    named = any(isinstance(a, str) and local in a for a in error.args)
    # An exception type that keeps its message elsewhere is left as it is.
    with contextlib.suppress(AttributeError, TypeError):
        error.args = tuple(a.replace(local, path) if isinstance(a, str) else a for a in error.args)
        for attr in ("path", "filename"):  # DamagedRecord's, an OSError's
            if getattr(error, attr, None) == local:
                setattr(error, attr, path)
                named = True
    return named


@contextlib.contextmanager
def reported_as(local: str, path: str):
    """Errors raised inside that name `local` (a copy of `path`) name `path` instead."""
    try:
        yield
    except Exception as e:
        rename_in_error(e, local, path)
        raise


def default_cache_dir() -> str:
    return os.environ.get("BERT_JAX_CACHE_DIR", os.path.expanduser("~/.cache/bert_jax"))


def local_copy(
    path: str, cache_dir: str | None = None, md5_hex: str | None = None, nbytes: int | None = None
) -> str:
    """`path` if local, else its copy under `cache_dir`, reused while the object's md5 is the same,
    published when whole and checked against `nbytes` and `md5_hex` where given."""
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
    bucket, key = bucket_and_key(path)
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
) -> list[str]:
    """`local_copy` of each path, 8 at a time: a bucket serves many objects at once faster."""
    if not any(is_url(p) for p in paths):
        return list(paths)
    none = itertools.repeat(None)
    with ThreadPoolExecutor(max(1, min(8, len(paths)))) as pool:
        return list(
            pool.map(local_copy, paths, itertools.repeat(cache_dir), md5s or none, nbytes or none)
        )


def local_dir(path: str, cache_dir: str | None = None) -> str:
    """A local directory holding the files directly under `path` (a Hugging Face model): `path`
    itself, or their `local_copy`s linked into `<cache_dir>/<bucket>/<key>.dir/`, kept in step."""
    if not is_url(path):
        return path
    listed = _fs(path, fresh=True).ls(path, detail=True)
    entries = [e for e in listed if e["type"] == "file" and basename(e["name"])]
    scheme = path.partition("://")[0]
    copies = local_copies([f"{scheme}://{e['name']}" for e in entries], cache_dir=cache_dir)
    bucket, key = bucket_and_key(path.rstrip("/"))
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
