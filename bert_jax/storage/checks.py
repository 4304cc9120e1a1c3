"""What is wrong with a path, in the words a local path gets, where finding out asks the server:
before a binary reads or writes anything (`check_paths`, `not_a_file`), around an Orbax call
(`checkpoint_errors`) and when a binary ends on a bucket client's error (`report`)."""

import contextlib
import fnmatch
import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence

from bert_jax import cli
from bert_jax.storage.errors import (
    AccessDenied,
    NotFound,
    PathError,
    Unavailable,
    _anonymous,
    convert,
    outage_line,
    refusal,
    refused_line,
    unavailable_message,
)
from bert_jax.storage.files import url_kind
from bert_jax.storage.paths import (
    StorageError,
    bucket_and_key,
    checkpoint_problem,
    is_url,
    parse,
    real_path,
)
from bert_jax.storage.remote import _fs, _named


def check_paths(
    paths: Mapping[str, str | Sequence[str] | None],
    *,
    outputs: Iterable[str] = (),
    local: Iterable[str] = (),
    checkpoints: Iterable[str] = (),
) -> None:
    """A binary's path flags (flag or config field -> value or list) parsed before any work: a
    bucket an output names must exist, `local` flags name local paths, `checkpoints` a place Orbax
    writes. The first problem is a StorageError naming its flag."""
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
    """Refuses an output that is a file another flag reads (or its glob matches)."""
    for out in _values(paths.get(flag)):
        if not is_url(out) and not os.path.isfile(out):
            continue  # a new file or a directory: nothing read is replaced
        here = real_path(out)  # a local one absolute: no URL (pattern) matches it
        for other, path in ((o, p) for o, v in paths.items() if o != flag for p in _values(v)):
            there = real_path(path)
            if here == there or (
                any(c in path for c in "*?[") and fnmatch.fnmatchcase(here, there)
            ):
                raise StorageError(
                    f"{flag}={out!r} is also read, as {other}={path!r}: writing it would replace "
                    "that input; name another file"
                )


def not_a_file(path: str) -> str | None:
    """Why `path` is not a file to read, as words that follow its name, or None; a refusal or an
    unreachable server is raised, never taken for a missing file."""
    if not is_url(path):
        return None if os.path.isfile(path) else cli.not_a_file(path)
    kind = url_kind(path)
    if kind is None:
        return missing(path)
    return None if kind == "file" else "is a directory (a prefix of objects), not a file"


def check_file(path: str, what: str) -> None:
    """Raises cli.UserError "`what` 'path' <why>" unless `path` is a file to read."""
    if why := not_a_file(path):
        raise cli.UserError(f"{what} {path!r} {why}")


def missing(url: str) -> str:
    """Why nothing is at `url`, as words that follow it: no bucket, a prefix, or no object."""
    with contextlib.suppress(Exception):  # only a finer line; the plain one is right too
        if not bucket_exists(url):
            return _NO_BUCKET.format(bucket_and_key(url)[0])
        if _fs(url)._fs.info(url.rstrip("/")).get("type") == "directory":
            return "is a directory (a prefix of objects), not a file"
    return "does not exist"


def report(error: BaseException) -> str | None:
    """The one line for an error of the bucket clients (cli.run asks it), or None: a NotFound
    refined by `missing`, an AccessDenied, an outage, a refusal unconverted (through Orbax)."""
    if isinstance(error, cli.UserError) and not isinstance(error, (PathError, Unavailable)):
        return None  # a line of its own (one that names the flag, say), whatever its cause
    chain = cli.causes(error)
    for e in chain:
        if isinstance(e, NotFound):
            return f"{e.url} {missing(e.url)}"
        if isinstance(e, PathError):
            return str(e)
    if (outage := unavailable_message(error)) is not None:
        return outage
    for e in chain:
        # A plain PermissionError is a local file's (cli reports it); the clients' own only.
        reason = None if type(e) is PermissionError else refusal(e)
        if reason is not None:
            return f"the storage server refused a request: Permission denied ({reason})"
    return None


_NO_BUCKET = "does not exist: there is no bucket {!r} (create it, or fix the name)"


def bucket_exists(url: str) -> bool:
    """Whether the bucket of `url` is there; a refusal is AccessDenied naming `url`."""
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
    """StorageError naming `flag` unless the URL's bucket is there, before anything is written."""
    try:
        there = bucket_exists(url)
    except AccessDenied as e:  # the flag named too, as cli.user_path names a local one
        raise StorageError(f"{flag}={url!r}: {e.strerror}") from e
    if not there:
        raise StorageError(f"{flag}={url!r} {_NO_BUCKET.format(bucket_and_key(url)[0])}")


# Orbax's errors: gcsfs' for its metadata, TensorStore's ValueError for its arrays (`STATUS: ...
# gs://b/k ... [http_response_code='403']`). Damage (a step's file NOT_FOUND, its bucket there;
# DATA_LOSS; bad JSON) stays unclassified, for checkpointing to report as a damaged step.

_STATUS = re.compile(r"^([A-Z_]+): ")
_REFUSED, _AWAY = ("PERMISSION_DENIED", "UNAUTHENTICATED"), ("UNAVAILABLE", "DEADLINE_EXCEEDED")
_URL = re.compile(r"""\b(?:gs|s3)://[^\s"'\]\[,;]+""")
_LOCAL = re.compile(r'local file "([^"]+)"')
# A request URL of the GCS JSON API (gcsfs and TensorStore name objects by them).
_REQUEST = re.compile(r"""https?://[^\s"']*?/storage/v1/b/([^/\s"'?]+)/o/([^\s"'?]+)""")
_HTTP_CODE = re.compile(r"http_response_code='(\d+)'")
_HTTP_BODY = re.compile(r"http_response_body='(.*?)'\]", re.S)


def object_url(text: str) -> str | None:
    """The first object a client's error text names, as the user would write it (gs://, s3://, a
    GCS request URL turned back into gs://bucket/key, TensorStore's `local file "..."`)."""
    request = _REQUEST.search(text)
    found = _URL.search(text)
    if request and (not found or request.start() < found.start()):
        return f"gs://{request.group(1)}/{urllib.parse.unquote(request.group(2))}"
    if found:
        return found.group(0).rstrip(".:")
    local = _LOCAL.search(text)
    return local.group(1) if local else None


def readable(text: str) -> str:
    """A client's error text with every request URL replaced by the object's gs:// path."""
    return _REQUEST.sub(
        lambda m: f"gs://{m.group(1)}/{urllib.parse.unquote(m.group(2))}",
        re.sub(r"\?alt=media\S*", "", text),
    )


def _server_message(text: str) -> str:
    """The server's own words in TensorStore's text, else its status line without the spec."""
    body = _HTTP_BODY.search(text)
    if body:
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(body.group(1))["error"]["message"])
    return text.split(" [", 1)[0][:300]


def _tensorstore(error: BaseException, directory: str) -> BaseException | None:
    """NotFound (its bucket gone), AccessDenied or Unavailable for a TensorStore status error."""
    text = str(error)
    status = _STATUS.match(text)
    if not isinstance(error, ValueError) or status is None:
        return None
    url = object_url(text) or directory
    code = int(_HTTP_CODE.search(text).group(1)) if _HTTP_CODE.search(text) else None
    if status.group(1) in _REFUSED or code in (401, 403):
        reason = detail = _server_message(text)
        if is_url(url):
            reason = refused_line(detail, url.startswith("gs://") and code == 401 and _anonymous())
        return AccessDenied(url, f"Permission denied ({reason})")
    if status.group(1) in _AWAY or (code or 0) >= 500:
        return Unavailable(
            f"{url}: {unavailable_message(error) or outage_line(_server_message(text))}"
        )
    if status.group(1) == "NOT_FOUND" and is_url(url) and not _bucket_there(url):
        return NotFound(url)
    return None


def _bucket_there(url: str) -> bool:
    """Whether `url`'s bucket is still there (else a NOT_FOUND is a damaged step's); True where
    that is unknown, so that the error is left as it was."""
    try:
        return bucket_exists(url)
    except Exception:
        return True


def classify(error: BaseException, directory: str) -> BaseException | None:
    """The NotFound (its bucket gone), AccessDenied or Unavailable naming the object (else
    `directory`) that an error of Orbax, or one in its chain, means, or None."""
    for chain in cli.causes(error):
        if isinstance(chain, (PathError, Unavailable)):
            return chain
        found = _tensorstore(chain, directory)
        if found is not None:
            return found
        url = object_url(str(chain)) or directory
        if not (isinstance(chain, FileNotFoundError) and "upload_id=" not in str(chain)):
            converted = convert(chain, url) if is_url(url) else None  # gcsfs' (through epath)
            if converted is not None:
                return converted
        elif is_url(url) and not _bucket_there(url):  # a metadata file's: is the bucket gone?
            return NotFound(url)
    return None


def looks_like_storage(error: BaseException) -> bool:
    """Whether `error` (or a cause) is a storage error by its text alone, asking no server: for
    the filter that keeps Orbax's threads from logging tracebacks of what the main one reports."""
    for chain in cli.causes(error):
        if isinstance(chain, (PathError, Unavailable)) or unavailable_message(chain):
            return True
        status = _STATUS.match(str(chain))
        if (
            isinstance(chain, ValueError)
            and status
            and status.group(1) in (*_REFUSED, *_AWAY, "NOT_FOUND")
        ):
            return True
    return False


@contextlib.contextmanager
def checkpoint_errors(directory: str) -> Iterator[None]:
    """An error of an Orbax call that `classify` knows raised as that storage error."""
    try:
        yield
    except Exception as e:
        found = classify(e, directory)
        if found is None or found is e:
            raise
        raise found from e


cli.add_error_reporter(report)
