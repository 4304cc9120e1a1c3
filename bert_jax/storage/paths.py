"""Paths, local or in a bucket (a URL: `<scheme>://`, SCHEMES served): a user's path parsed once
(`parse`, refusing what `_problem` names), joined and split as its kind does. docs/scaling.md,
"Buckets (gs:// and s3://)": "Paths"."""

import os
import posixpath
import re

from bert_jax import cli

SCHEMES = ("gs", "s3")
# Where Orbax 0.12 can write checkpoints besides local paths (docs/scaling.md, "s3://").
CHECKPOINT_SCHEMES = ("gs",)

_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# A storage (or web) scheme written without its two slashes: `gs:/x`, `gs:x`, `s3:`. Checked
# before the URL pattern, so a local file really named like that needs a `./` in front.
_HALF_URL = re.compile(
    r"(gs|s3|gcs|s3a|s3n|https?|file|hdfs|az|abfss?|hf):(?!//)(/?)(.*)", re.IGNORECASE | re.DOTALL
)
# GCS: 3-63 characters (222 with dots) of a-z 0-9 - _ . beginning and ending with a letter or
# digit; S3 the same without `_` (older buckets may hold capitals and `_`: allowed).
_BUCKET = {
    "gs": re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"),
    "s3": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]"),
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_KEY_BYTES = 1024


class StorageError(cli.UserError):
    """A path that cannot be used as given (a malformed URL, no bucket, no credentials)."""


def _problem(path: str) -> str | None:
    """What is wrong with `path` as a path (words that follow it), or None."""
    if "\x00" in path:
        return "holds a NUL byte"
    half = _HALF_URL.match(path)
    if half:
        scheme, slash, rest = half.group(1).lower(), half.group(2), half.group(3)
        fixed = f"{scheme}://{rest}" if scheme in SCHEMES else f"a local path or {SCHEMES[0]}://"
        given = "one" if slash else "none"
        return (
            f"is not a bucket URL: {half.group(1)}: needs two slashes, {given} given (did you "
            f"mean {fixed!r}? a local file of that name: write ./{path})"
        )
    url = _URL.match(path)
    if not url:
        return None
    scheme = url.group(1)
    if scheme not in SCHEMES:
        hint = (
            f"write {scheme.lower()}:// in lower case"
            if scheme.lower() in SCHEMES
            else "pass the local path itself"
            if scheme.lower() == "file"
            else f"pass a local path, {' or '.join(s + '://bucket/...' for s in SCHEMES)}"
        )
        return f"{scheme}:// paths are not supported; {hint}"
    bucket, _, key = path[url.end() :].partition("/")
    if not bucket:
        return f"names no bucket; write {scheme}://BUCKET/PATH"
    if not _BUCKET[scheme].fullmatch(bucket):
        return (
            f"{bucket!r} is not a valid bucket name (3 to 63 lower-case letters, digits, '-', "
            "'_' or '.', beginning and ending with a letter or digit)"
        )
    parts = key.rstrip("/").split("/") if key.rstrip("/") else []
    if "" in parts:
        return "has an empty part ('//'); an object store keeps it as part of the name"
    dots = [p for p in parts if p in (".", "..")]
    if dots:
        return (
            f"has a {dots[0]!r} part; an object store does not resolve it (it would be part of "
            "the objects' names): write the path without it"
        )
    if _CONTROL.search(key):
        return "holds a control character (a line break, a tab); object names cannot"
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        return f"is longer than the {MAX_KEY_BYTES} bytes an object name may have"
    return None


def parse(path: str, flag: str | None = None) -> str:
    """`path` as the package takes it (a URL without trailing slashes, a local path with `~`
    expanded), or a StorageError naming `flag`."""
    path = str(path)
    if not path.strip():
        raise StorageError(f"{flag} is empty; pass a path" if flag else "an empty path")
    if problem := _problem(path):
        raise StorageError(f"{flag}={path!r} {problem}" if flag else f"{path!r} {problem}")
    # A valid URL names a bucket: stripping its trailing slashes leaves `scheme://bucket` at least.
    return path.rstrip("/") if _URL.match(path) else os.path.expanduser(path)


# TensorStore, which writes a checkpoint's arrays, reads a gs:// path as a URL: '#' and '?' end
# its path and '%' escapes a byte, so the arrays would go elsewhere than the metadata Orbax writes
# through gcsfs (a workdir gs://b/w#1 put them under gs://b/w: measured).
_TENSORSTORE_SPECIAL = "#?%"


def checkpoint_problem(path: str, flag: str | None = None) -> str | None:
    """The line refusing the URL `path` as a place for checkpoints, or None."""
    where = f"{flag}={path!r}" if flag else repr(path)
    if path.partition("://")[0] not in CHECKPOINT_SCHEMES:
        served = ", ".join(s + "://" for s in CHECKPOINT_SCHEMES)
        return (
            f"{where}: checkpoints cannot be kept in {path.partition('://')[0]}:// (Orbax, which "
            f"writes them, serves local paths and {served} only); use a gs:// or local "
            "directory for the run (its records and exports may stay in s3://)"
        )
    special = sorted({c for c in bucket_and_key(path)[1] if c in _TENSORSTORE_SPECIAL})
    if special:
        return (
            f"{where}: checkpoints cannot be kept under a name holding {' or '.join(special)!s} "
            "(TensorStore, which writes their arrays, reads a bucket path as a URL: they would "
            "land under another name); name the directory without it"
        )
    return None


def is_url(path: str) -> bool:
    """Whether `path` names an object in a bucket; a malformed one is a StorageError."""
    path = str(path)
    if "://" not in path and ":" not in path[:6] and "\x00" not in path:
        return False  # the common case, a plain local path: no pattern to match
    parse(path)  # a malformed one is a StorageError
    return _URL.match(path) is not None


def real_path(path: str) -> str:
    """One spelling per file, to tell whether two paths name the same one."""
    return path if is_url(path) else os.path.realpath(path)


def bucket_and_key(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("://")[2].partition("/")
    return bucket, key.rstrip("/")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def dirname(path: str) -> str:
    if is_url(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
    return posixpath.basename(str(path).rstrip("/"))


def expand(path: str) -> str:
    return path if is_url(path) else os.path.expanduser(path)
