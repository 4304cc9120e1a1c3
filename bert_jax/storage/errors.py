"""What the bucket clients' errors mean, in the words a local path gets for the same situation,
naming the path the user gave (never a request URL or a local cache copy): NotFound,
AccessDenied (also FileNotFoundError and PermissionError, with errno and filename, so callers
that catch those still do) and Unavailable (the outage line, after the retry budget); all three
are StorageErrors (cli.UserError), printed as one `error:` line. `convert` makes them from
gcsfs' and s3fs' errors where a call about a path fails (remote._Retrying); `classify` from
Orbax's (TensorStore's status text, gcsfs' through epath) around an Orbax call
(`checkpoint_errors`); checks.report refines a NotFound when the line is printed. The list a
user sees: docs/scaling.md, "Buckets (gs:// and s3://)": "Errors"; Orbax's: docs/faults.md.
"""

import contextlib
import errno
import json
import re
import sys
import urllib.parse
from collections.abc import Iterator

from bert_jax import cli
from bert_jax.storage.paths import StorageError, is_url

# --- The errors -----------------------------------------------------------------------------


class PathError(StorageError):
    """A StorageError that is also an OSError of `errno` about `url` (see the subclasses)."""

    errno_ = 0

    def __init__(self, url: str, strerror: str):
        super().__init__(f"{url}: {strerror}")
        self.errno, self.strerror, self.filename = self.errno_, strerror, url
        self.url = url

    def __str__(self) -> str:  # OSError's would be "[Errno 2] ...: 'url'"
        return f"{self.url}: {self.strerror}"

    def __reduce__(self):  # a worker process's error reaches its parent whole
        return type(self), (self.url, self.strerror)


class NotFound(PathError, FileNotFoundError):
    """No object (or no bucket) at `url`."""

    errno_ = errno.ENOENT

    def __init__(self, url: str, strerror: str = "does not exist"):
        super().__init__(url, strerror)


class AccessDenied(PathError, PermissionError):
    """The server refused the request: no credentials, or credentials without the permission."""

    errno_ = errno.EACCES


class Unavailable(StorageError):
    """A bucket that stayed unreachable through the retries, as one picklable error whose message
    is `unavailable_message`'s line (the clients' own errors do not all survive being sent from a
    worker process to its parent)."""


# --- The clients' errors, classified --------------------------------------------------------


def transient(error: BaseException) -> bool:
    """An error a later try may not meet: a timeout, a refused or dropped connection, a 5xx,
    408 or 429 answer, an expired token (what the clients retry, and the timeouts they do
    not)."""
    if isinstance(error, PathError):
        return False
    if isinstance(error, (TimeoutError, ConnectionError)):  # fsspec's FSTimeoutError too
        return True
    name = type(error).__name__
    if name in ("ProxyError", "ConnectionError", "ChunkedEncodingError", "ReadTimeout"):
        return True  # requests' exceptions, which gcsfs raises for a 502 (a proxy's answer)
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError"):
        return True  # botocore's (s3fs)
    with contextlib.suppress(ImportError):
        import aiohttp

        if isinstance(error, aiohttp.ClientResponseError):
            return error.status >= 500 or error.status in (408, 429)
        if isinstance(error, aiohttp.ClientError):
            return True
    code = _http_code(error)
    if code is not None:
        # gcsfs' rule: a 401 saying "Invalid Credentials" is an expired token, renewed next try.
        expired = code == 401 and "Invalid Credentials" in str(error)
        return expired or code in (408, 429) or 500 <= code < 600
    return False


def _http_code(error: BaseException) -> int | None:
    """The HTTP status of a gcsfs HttpError, else None."""
    if type(error).__name__ == "HttpError" and isinstance(getattr(error, "code", None), int):
        return error.code
    return None


def refusal(error: BaseException) -> str | None:
    """The reason for a refused request (401, 403, no credentials), else None."""
    code = _http_code(error)
    name = type(error).__name__
    forbidden = type(error) is OSError and str(error).startswith("Forbidden")  # gcsfs' 403
    if not (code in (401, 403) or forbidden or isinstance(error, PermissionError)):
        if name not in ("NoCredentialsError", "PartialCredentialsError", "RefreshError"):
            return None
    detail = " ".join(str(error).split("\n")[-1].split())[:200] or name
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return (
            f"no credentials ({detail}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "AWS_PROFILE, or run on a machine with an instance role"
        )
    if name == "RefreshError":
        return f"the credentials could not be used ({detail}): {_GOOGLE_HINT}"
    if code == 401 and _anonymous():
        return f"no credentials were found ({detail}): {_GOOGLE_HINT}"
    return f"the server refused the credentials in use ({detail}); give them access to the bucket"


_GOOGLE_HINT = (
    "on a Cloud VM give its service account access to the bucket; elsewhere run `gcloud auth "
    "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
)


def _anonymous() -> bool:
    """Whether gs:// requests go without credentials (gcsfs found none, or was told so)."""
    if "gcsfs" not in sys.modules:
        return False
    import fsspec

    instances = list(getattr(fsspec.get_filesystem_class("gs"), "_cache", {}).values())
    return any(getattr(fs.credentials, "method", None) == "anon" for fs in instances)


def convert(error: BaseException, url: str) -> BaseException | None:
    """A NotFound, AccessDenied or Unavailable naming `url` (the path the call was about) for a
    client's error that means one, else None (the error stays as it is)."""
    if isinstance(error, PathError):
        return None
    if isinstance(error, FileNotFoundError) and "upload_id=" not in str(error):
        return NotFound(url)  # a lost upload session is an outage (unavailable_message)
    reason = refusal(error)
    if reason is not None and not transient(error):
        return AccessDenied(url, f"Permission denied ({reason})")
    outage = unavailable_message(error)
    if outage is not None and not isinstance(error, Unavailable):
        return Unavailable(f"{url}: {outage}")
    return None


# --- The outage line ------------------------------------------------------------------------


def unavailable_message(error: BaseException) -> str | None:
    """The one line for an error of the bucket clients that retries could not get past (the
    server down, 5xx answers, stalls), or None if `error` is not one."""
    if isinstance(error, Unavailable):
        return str(error)
    if "gcsfs" not in sys.modules and "s3fs" not in sys.modules:
        return None
    for chain in cli.causes(error):
        if isinstance(chain, PathError):
            return None
        # gcsfs reports an upload session the server no longer knows (404 on its upload_id:
        # the server restarted, or the session expired) as FileNotFoundError naming that URL.
        lost_upload = isinstance(chain, FileNotFoundError) and "upload_id=" in str(chain)
        # TensorStore (Orbax's array writes) raises ValueError once its retries are spent.
        tensorstore = isinstance(chain, ValueError) and "retry attempts failed" in str(chain)
        if refusal(chain) is not None and not transient(chain):
            return None  # a refusal, not an outage: checks.report says so
        if lost_upload or tensorstore or transient(chain) or _http_code(chain) is not None:
            return outage_line(" ".join(str(chain).split())[:300] or type(chain).__name__)
    return None


def outage_line(detail: str) -> str:
    """The line for a bucket that did not serve a request through the retries (`detail`: why)."""
    return (
        f"the storage server did not serve the request after its retries ({detail}); finished "
        "work is kept and nothing half-written is used: rerun the same command when the bucket "
        "is reachable"
    )


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


# --- Orbax's errors -------------------------------------------------------------------------
# Its metadata files fail as gcsfs' errors (through etils.epath), its arrays as TensorStore's
# ValueError, whose text starts with an absl status and names the object (`PERMISSION_DENIED:
# Error writing gs://b/k: ... [http_response_code='403']`). Damage (a NOT_FOUND for one file of a
# step whose bucket is there, a DATA_LOSS, a JSON file that does not parse) stays unclassified,
# for checkpointing to report as a damaged step.

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
    from bert_jax.storage.checks import bucket_exists  # checks imports this module

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
