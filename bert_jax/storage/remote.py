"""The bucket clients: their settings (`configure`), the file system of a URL (`_fs`), and the one
retry budget every call to a bucket spends, in place of the clients' own retries (gcsfs', s3fs',
TensorStore's). docs/scaling.md, "Buckets (gs:// and s3://)": "Faults"."""

import asyncio
import contextlib
import functools
import logging
import os
import time

from bert_jax import cli
from bert_jax.storage.errors import convert, transient
from bert_jax.storage.paths import is_url

# A request that gets no answer for this long is tried again (a stalled server or proxy).
REQUEST_TIMEOUT_S = 60
# A call about one object not back after this long is tried again: gcsfs' request timeout bounds
# a request, not a coroutine waiting on something else (docs/scaling.md, "Credentials").
CALL_TIMEOUT_S = 3 * REQUEST_TIMEOUT_S
_METADATA_CALLS = frozenset(("info", "isdir", "isfile", "exists"))
# How long a failing call is tried again (env BERT_JAX_STORAGE_RETRY_S) from its first failure:
# a server restarting is waited out, a bucket really gone ends the job in about a minute.
RETRY_S = 60.0
MAX_DELAY_S = 30.0
_LOG = logging.getLogger("bert_jax.storage")
# The mark of an error whose call spent the budget: an enclosing retry loop raises it at once.
_SPENT = "_bert_jax_retries_spent"


def retry_seconds() -> float:
    return float(os.environ.get("BERT_JAX_STORAGE_RETRY_S", RETRY_S))


class _Budget:
    """The tries of one call: after 1, 2, 4, ... MAX_DELAY_S s, until retry_seconds() passed."""

    def __init__(self):
        self.first_failure: float | None = None
        self.delay = 1.0

    def next_delay(self, error: BaseException) -> float | None:
        """Seconds to wait before trying again after `error`, or None: raise it."""
        if not transient(error) or any(getattr(e, _SPENT, False) for e in cli.causes(error)):
            return None
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        left = self.first_failure + retry_seconds() - now
        if left <= 0:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(error, _SPENT, True)
            return None
        delay, self.delay = min(self.delay, left), min(2 * self.delay, MAX_DELAY_S)
        # INFO: an outage the budget rides out changes nothing the user must see; one it does
        # not is the one `error:` line (--verbosity=0 shows each try).
        detail = " ".join(str(error).split())[:200]
        _LOG.info("storage: %s (%s); trying again in %.0f s", type(error).__name__, detail, delay)
        return delay


def _retrying(call, *args, **kwargs):
    """call(*args, **kwargs), tried again on transient errors within the budget."""
    budget = _Budget()
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as e:
            if (delay := budget.next_delay(e)) is None:
                raise
            time.sleep(delay)


async def _retrying_async(call, *args, **kwargs):
    budget = _Budget()
    while True:
        try:
            return await call(*args, **kwargs)
        except Exception as e:
            if (delay := budget.next_delay(e)) is None:
                raise
            await asyncio.sleep(delay)


def tensorstore_retries() -> dict:
    """TensorStore's gcs_request_retries for the same budget."""
    delays, delay = [], 1
    while sum(delays) < retry_seconds():
        delays.append(min(delay, 32))
        delay *= 2
    return {
        "max_retries": max(1, len(delays)),
        "initial_delay": "1s",
        "max_delay": f"{max(delays, default=1)}s",
    }


_configured = False


@functools.cache  # one class, however often `configure` runs (tests reconfigure)
def _budgeted_gcs():
    """gcsfs' JSON-API client with each request tried on the budget, not gcsfs' fixed 6 tries."""
    from gcsfs.core import GCSFileSystem

    class BudgetedGCSFileSystem(GCSFileSystem):
        async def _request(self, *args, **kwargs):
            return await _retrying_async(GCSFileSystem._request.__wrapped__, self, *args, **kwargs)

        async def _get_file_request(self, *args, **kwargs):
            request = GCSFileSystem._get_file_request.__wrapped__
            return await _retrying_async(request, self, *args, **kwargs)

    return BudgetedGCSFileSystem


@functools.cache  # one class, however often `configure` runs
def _once_s3():
    """s3fs' client trying each call once (not its own 5 tries, with botocore's inside each)."""
    import s3fs

    class OnceS3FileSystem(s3fs.S3FileSystem):
        retries = 1

    return OnceS3FileSystem


def configure() -> None:
    """The bucket clients' settings, once, before the first URL is touched."""
    global _configured
    if _configured:
        return
    # gcsfs' control-plane probe (zonal / hierarchical-namespace buckets) only stalls against
    # other endpoints; we use the JSON API anyway (docs/scaling.md, "Credentials").
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import fsspec

    with contextlib.suppress(ImportError):
        # The variable is read once, when gcsfs is first imported (maybe before us): name the
        # JSON-API client here, with the budget (etils.epath, and so Orbax, asks fsspec for it).
        budgeted = _budgeted_gcs()
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, budgeted, clobber=True)
    gcs = fsspec.config.conf.setdefault("gcs", {})
    gcs.setdefault("requests_timeout", REQUEST_TIMEOUT_S)
    with contextlib.suppress(ImportError):
        fsspec.register_implementation("s3", _once_s3(), clobber=True)
        # botocore tries each call again too (up to 5 times): once here.
        s3 = fsspec.config.conf.setdefault("s3", {})
        s3.setdefault("config_kwargs", {"retries": {"max_attempts": 1, "mode": "standard"}})
    # gcsfs, and fsspec's prefetcher that gcsfs reads files through, log a traceback of every
    # request they give up on and then raise the same error, which the binaries report.
    for name in ("gcsfs", "fsspec.prefetcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        gcs.setdefault("token", "anon")
        os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", emulator)
        # TensorStore sends this as the bearer token instead of looking for credentials.
        os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    _configured = True


def _fs(path: str, fresh: bool = False):
    """The fsspec file system of a URL (etils.epath's, and so Orbax's), as a `_Retrying`; `fresh`:
    without gcsfs' cached listing of `path` (another process may have written since)."""
    configure()
    from etils.epath import backend

    fs = _Retrying(backend.fsspec_backend.fs(path))
    if fresh:
        fs.invalidate_cache(path)
    return fs


def _subject(name: str, args: tuple) -> str | None:
    """The URL a file-system call is about (put_file's is its second argument)."""
    path = args[1] if name == "put_file" and len(args) > 1 else args[0] if args else None
    return path if isinstance(path, str) and "://" in path else None


def _named(call, url: str | None, tries: bool = True):
    """`call`, tried on the budget (if `tries`), its errors converted to those naming `url`."""

    def run(*args, **kwargs):
        try:
            return _retrying(call, *args, **kwargs) if tries else call(*args, **kwargs)
        except Exception as e:
            converted = convert(e, url) if url else None
            if converted is None:
                raise
            raise converted from e

    return run


class _Retrying:
    """A file system whose calls (and open files' reads) go through `_named`."""

    def __init__(self, fs):
        self._fs = fs

    def __getattr__(self, name):
        attribute = getattr(self._fs, name)
        if not callable(attribute) or name in ("invalidate_cache", "open"):
            return attribute
        if name in _METADATA_CALLS and hasattr(attribute, "__wrapped__"):
            # fsspec's sync wrapper takes `timeout` itself (FSTimeoutError: tried again).
            attribute = functools.partial(attribute, timeout=CALL_TIMEOUT_S)
        return lambda *args, **kwargs: _named(attribute, _subject(name, args))(*args, **kwargs)

    def open(self, path, mode="rb", **kwargs):
        f = _named(self._fs.open, path)(path, mode, **kwargs)
        if "r" not in mode:
            return f
        raw = getattr(f, "buffer", f)
        cache = raw.cache
        if getattr(cache, "fetcher", None) is not None:
            cache.fetcher = _named(cache.fetcher, path)
        # gcsfs reads ahead in a background prefetcher with its own copy of the fetcher: its
        # errors (an object deleted meanwhile) reach the reader here, named by the request.
        for name in ("read", "readinto"):
            setattr(raw, name, _named(getattr(raw, name), path, tries=False))
        return f


def forget_listings(path: str) -> None:
    """Drops gcsfs' cached listings under `path`, for a reader listing through Orbax."""
    if is_url(path):
        _fs(path).invalidate_cache()
