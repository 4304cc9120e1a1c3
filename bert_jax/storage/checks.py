"""What is wrong with a path, asked before a binary reads or writes anything: each binary's path
flags parsed once (`check_paths`: paths.parse, a bucket an output names is there, checkpoints
only where Orbax writes them), a file to read that is not one (`not_a_file`, in the words a
local path gets: cli.not_a_file), and the one line for a bucket client's error when a binary
ends on it (`report`, which cli.run asks)."""

import contextlib
import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence

from bert_jax import cli
from bert_jax.storage.errors import (
    AccessDenied,
    NotFound,
    PathError,
    Unavailable,
    refusal,
    unavailable_message,
)
from bert_jax.storage.files import url_kind
from bert_jax.storage.paths import (
    StorageError,
    bucket_and_key,
    checkpoint_problem,
    is_url,
    parse,
)
from bert_jax.storage.remote import _fs, _named

# --- Before anything is read or written -----------------------------------------------------


def check_paths(
    paths: Mapping[str, str | Sequence[str] | None],
    *,
    outputs: Iterable[str] = (),
    local: Iterable[str] = (),
    checkpoints: Iterable[str] = (),
) -> None:
    """A binary's path flags, parsed before it reads or writes anything: `paths` maps each flag
    (or config field) to its value (None or "" for unset, a list for a list flag). The flags in
    `outputs` are written: a bucket there must exist (asked of the server now, not found at the
    first upload); those in `local` must name local paths (a cache directory), those in
    `checkpoints` a place Orbax can write (CHECKPOINT_SCHEMES). Raises the first problem as a
    StorageError naming its flag."""
    outputs, local, checkpoints = set(outputs), set(local), set(checkpoints)
    for flag, value in paths.items():
        for path in _values(value):
            parsed = parse(path, flag)
            if flag in local and is_url(parsed):
                raise StorageError(f"{flag}={path!r} must be a local directory, not a bucket")
            scheme = parsed.partition("://")[0] if is_url(parsed) else ""
            if flag in checkpoints and scheme and (problem := checkpoint_problem(parsed, flag)):
                raise StorageError(problem)
            if flag in outputs and scheme:
                check_bucket(parsed, flag)
    for flag in outputs:
        _not_an_input(flag, paths)


def _values(value) -> list[str]:
    return [v for v in ([value] if isinstance(value, str) else (value or [])) if v]


def _not_an_input(flag: str, paths: Mapping[str, str | Sequence[str] | None]) -> None:
    """Refuses an output that is a file another flag reads (`--output` = `--input`, or matched
    by its glob): writing it would replace the input (docs/faults.md)."""
    for out in _values(paths.get(flag)):
        local = not is_url(out)
        if local and not os.path.isfile(out):
            continue  # a new file or a directory: nothing read is replaced
        here = os.path.realpath(out) if local else out
        for other, value in paths.items():
            if other == flag:
                continue
            for path in _values(value):
                if is_url(path) != (not local):
                    continue
                there = os.path.realpath(path) if local else path
                if here == there or (
                    any(c in path for c in "*?[") and fnmatch.fnmatchcase(here, there)
                ):
                    raise StorageError(
                        f"{flag}={out!r} is also read, as {other}={path!r}: writing it would "
                        "replace that input; name another file"
                    )


def not_a_file(path: str) -> str | None:
    """Why `path` is not a file to read, as words that follow its name, the same for both kinds
    (a local path: missing, a directory, a pipe, ...: cli.not_a_file; a URL: no such object, no
    such bucket, a prefix: `missing`), or None when it is one. A refusal (no credentials)
    or an unreachable server is raised, never taken for a missing file."""
    if not is_url(path):
        return None if os.path.isfile(path) else cli.not_a_file(path)
    kind = url_kind(path)
    if kind is None:
        return missing(path)
    return None if kind == "file" else "is a directory (a prefix of objects), not a file"


def check_file(path: str, what: str) -> None:
    """Raises cli.UserError "`what` 'path' <why>" unless `path` is a file to read."""
    why = not_a_file(path)
    if why:
        raise cli.UserError(f"{what} {path!r} {why}")


# --- When a binary ends on a bucket's error -------------------------------------------------


def missing(url: str) -> str:
    """Why nothing is at `url`, as words that follow it: no bucket, a prefix, or no object."""
    with contextlib.suppress(Exception):  # only a finer line; the plain one is right too
        bucket = bucket_and_key(url)[0]
        if not bucket_exists(url):
            return f"does not exist: there is no bucket {bucket!r} (create it, or fix the name)"
        if _fs(url)._fs.info(url.rstrip("/")).get("type") == "directory":
            return "is a directory (a prefix of objects), not a file"
    return "does not exist"


def report(error: BaseException) -> str | None:
    """The one line for an error of the bucket clients (cli.run asks it): a NotFound refined by
    `missing`, an AccessDenied, the outage line, a refusal that reached us unconverted (through
    Orbax), or None if `error` is none of them."""
    if isinstance(error, cli.UserError) and not isinstance(error, (PathError, Unavailable)):
        return None  # a line of its own (one that names the flag, say), whatever its cause
    chain = cli.causes(error)
    for e in chain:
        if isinstance(e, NotFound):
            return f"{e.url} {missing(e.url)}"
        if isinstance(e, PathError):
            return str(e)
    outage = unavailable_message(error)
    if outage is not None:
        return outage
    for e in chain:
        # A plain PermissionError is a local file's (cli reports it); the clients' own only.
        reason = None if type(e) is PermissionError else refusal(e)
        if reason is not None:
            return f"the storage server refused a request: Permission denied ({reason})"
    return None


# --- Buckets --------------------------------------------------------------------------------


def bucket_exists(url: str) -> bool:
    """Whether the bucket of `url` is there (asked of the server; tried on the budget, a refusal
    is AccessDenied naming `url`)."""
    fs, bucket = _fs(url)._fs, bucket_and_key(url)[0]
    try:
        if url.startswith("gs://"):
            _named(fs.call, url)("GET", "b/{}", bucket, json_out=True)
        else:
            _named(fs.call_s3, url)("head_bucket", Bucket=bucket)
    except NotFound:
        return False
    return True


def check_bucket(url: str, flag: str) -> None:
    """Raises StorageError naming `flag` when `url`'s bucket is not there: before a binary writes
    anything into it (an upload into a missing bucket fails only at the end)."""
    if not is_url(url):
        return
    try:
        there = bucket_exists(url)
    except AccessDenied as e:  # the flag named too, as cli.user_path names a local one
        raise StorageError(f"{flag}={url!r}: {e.strerror}") from e
    if not there:
        raise StorageError(
            f"{flag}={url!r} does not exist: there is no bucket {bucket_and_key(url)[0]!r} "
            "(create it, or fix the name)"
        )


cli.add_error_reporter(report)
