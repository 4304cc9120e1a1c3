"""The bucket clients' errors in the words a local path gets, naming the user's path, asking no
server (`convert`): NotFound, AccessDenied (also OSErrors, so that callers catching those still
do) and Unavailable (after the retry budget). checks.py refines them where that asks the server.
docs/scaling.md, "Buckets (gs:// and s3://)": "Errors"."""

import contextlib
import errno
import sys
from collections.abc import Iterator

from bert_jax import cli
from bert_jax.storage.paths import StorageError


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
    """A bucket unreachable through the retries: the outage line, picklable (the clients' own
    errors do not all survive being sent from a worker process to its parent)."""


def transient(error: BaseException) -> bool:
    """An error a later try may not meet: a timeout, a refused or dropped connection, a 5xx,
    408 or 429 answer, an expired token."""
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


def _http_code(error: BaseException) -> int | None:  # a gcsfs HttpError's
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
    return refused_line(detail, anonymous=code == 401 and _anonymous())


def refused_line(detail: str, anonymous: bool) -> str:
    if anonymous:
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
    """A NotFound, AccessDenied or Unavailable naming `url` for a client's error, or None."""
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


def unavailable_message(error: BaseException) -> str | None:
    """The line for a bucket client's error that the retries could not get past, or None."""
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
    return (
        f"the storage server did not serve the request after its retries ({detail}); finished "
        "work is kept and nothing half-written is used: rerun the same command when the bucket "
        "is reachable"
    )


@contextlib.contextmanager
def unavailable_as_user_error() -> Iterator[None]:
    """An outage as `Unavailable`, for worker processes, whose errors are pickled to the parent."""
    try:
        yield
    except Exception as e:
        text = unavailable_message(e)
        if text is None or isinstance(e, Unavailable):
            raise
        raise Unavailable(text) from None
