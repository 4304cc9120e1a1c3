"""Orbax's errors in the storage layer's words (errors.py): a checkpoint directory that is refused,
whose bucket is gone or whose server stays away, named by its path and cause in one line instead
of TensorStore's status text with its spec and request URL, or a screen of tracebacks.

Orbax's metadata files fail as etils.epath's (gcsfs: HttpError, FileNotFoundError, which
errors.convert knows), its arrays as TensorStore's ValueError, whose text starts with an absl
status and names the object (`PERMISSION_DENIED: Error writing gs://b/k: ...
[http_response_code='403']`). `classify` turns either into NotFound / AccessDenied / Unavailable
naming that object (or the checkpoint directory, where the error names none);
`checkpoint_errors` does it around an Orbax call. Damage (a NOT_FOUND for one file of a step
whose bucket is there, a DATA_LOSS, a JSON file that does not parse) stays unclassified, for
checkpointing to report as a damaged step; anything else keeps its traceback.
"""

import contextlib
import json
import re
import urllib.parse
from collections.abc import Iterator

from bert_jax import cli
from bert_jax.storage.errors import (
    _GOOGLE_HINT,
    AccessDenied,
    NotFound,
    PathError,
    Unavailable,
    _anonymous,
    convert,
    outage_line,
    unavailable_message,
)
from bert_jax.storage.paths import is_url

_STATUS = re.compile(r"^([A-Z_]+): ")
_URL = re.compile(r"""\b(?:gs|s3)://[^\s"'\]\[,;]+""")
_LOCAL = re.compile(r'local file "([^"]+)"')
# A request URL of the GCS JSON API (gcsfs and TensorStore name objects by them).
_REQUEST = re.compile(r"""https?://[^\s"']*?/storage/v1/b/([^/\s"'?]+)/o/([^\s"'?]+)""")
_HTTP_CODE = re.compile(r"http_response_code='(\d+)'")
_HTTP_BODY = re.compile(r"http_response_body='(.*?)'\]", re.S)


def object_url(text: str) -> str | None:
    """The first object a client's error text names, as a path the user would write: gs:// or
    s3:// as it stands, a GCS request URL turned back into gs://bucket/key, a local file's path
    (TensorStore's `local file "..."`)."""
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
    """The server's own words in TensorStore's text (its http_response_body), else the status
    line without the spec."""
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
    if status.group(1) in ("PERMISSION_DENIED", "UNAUTHENTICATED") or code in (401, 403):
        detail = _server_message(text)
        if url.startswith("gs://") and code == 401 and _anonymous():
            reason = f"no credentials were found ({detail}): {_GOOGLE_HINT}"
        elif is_url(url):
            reason = f"the server refused the credentials in use ({detail}); give them access"
        else:
            reason = detail
        return AccessDenied(url, f"Permission denied ({reason})")
    if status.group(1) in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or (code or 0) >= 500:
        return Unavailable(
            f"{url}: {unavailable_message(error) or outage_line(_server_message(text))}"
        )
    if status.group(1) == "NOT_FOUND" and is_url(url) and not _bucket_there(url):
        return NotFound(url)
    return None


def _bucket_there(url: str) -> bool:
    """Whether `url`'s bucket is still there (a NOT_FOUND for a file of a step whose bucket is
    there is a damaged step, not a storage error). Unknown (the server refuses or is away):
    True, so that the error is left as it was."""
    from bert_jax.storage.checks import bucket_exists

    try:
        return bucket_exists(url)
    except Exception:
        return True


def classify(error: BaseException, directory: str) -> BaseException | None:
    """A NotFound (the checkpoint's bucket gone), AccessDenied or Unavailable naming the object
    (or `directory`, the checkpoint directory, where the error names none) for an error of Orbax
    that means one, else None. The error's whole chain is searched: Orbax wraps TensorStore's."""
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
    the filter that keeps Orbax's background threads from logging a screen of tracebacks for
    an error the main thread then reports in one line."""
    for chain in cli.causes(error):
        if isinstance(chain, (PathError, Unavailable)) or unavailable_message(chain):
            return True
        status = _STATUS.match(str(chain))
        if isinstance(chain, ValueError) and status and status.group(1) in _STORAGE_STATUSES:
            return True
    return False


_STORAGE_STATUSES = (
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "NOT_FOUND",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
)


@contextlib.contextmanager
def checkpoint_errors(directory: str) -> Iterator[None]:
    """Around an Orbax call on the checkpoints in `directory`: an error `classify` knows is
    raised as that storage error (one `error:` line naming the object and the cause); others
    are left as they are."""
    try:
        yield
    except Exception as e:
        found = classify(e, directory)
        if found is None or found is e:
            raise
        raise found from e
