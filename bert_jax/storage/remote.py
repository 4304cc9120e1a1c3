"""The bucket clients: their settings (`configure`), the file system of a URL (`_fs`), and the
faults: every call tried again on transient errors (`_retrying`, until retry_seconds()), and the
one error line for a bucket that stayed unreachable (`unavailable_message`, which cli.run asks
through cli.add_error_reporter). See the package docstring, "Faults"."""

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator

from bert_jax import cli
from bert_jax.storage.paths import StorageError, is_url

# A request that gets no answer for this long is tried again (a stalled server or proxy).
REQUEST_TIMEOUT_S = 60
# A call about one object (info, isdir, isfile, exists) not back after this long is tried again,
# whatever held it up: gcsfs' request timeout bounds each HTTP request, not a call whose coroutine
# waits on something else (seen in the test suite: gcsfs' experimental client, imported before
# `configure`, waited in isdir with no request open). Listings and transfers have no such bound:
# their time grows with the bucket or the object.
CALL_TIMEOUT_S = 3 * REQUEST_TIMEOUT_S
_METADATA_CALLS = frozenset(("info", "isdir", "isfile", "exists"))
# How long an operation is tried again while the server fails it transiently (env
# BERT_JAX_STORAGE_RETRY_S): long enough for a server restarting or a network blip, short enough
# that a bucket that is really gone ends the job with its error line within minutes.
RETRY_S = 300.0
# TensorStore's GCS retries (its context resource gcs_request_retries), set to gcsfs' budget:
# TensorStore's own default (32 tries, up to 32 s apart) keeps a save waiting ~15 minutes on a
# bucket that is gone, long after gcsfs has given up on the same save's metadata files.
TENSORSTORE_RETRIES = {"max_retries": 6, "initial_delay": "1s", "max_delay": "32s"}


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

    with contextlib.suppress(ImportError):
        import gcsfs.core

        # The variable is read once, when gcsfs is first imported; imported earlier (by anything)
        # without it, gs:// would resolve to gcsfs' experimental client, whose first call to an
        # endpoint without that API was seen waiting forever. Name the JSON-API client here.
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)

    gcs = fsspec.config.conf.setdefault("gcs", {})
    gcs.setdefault("requests_timeout", REQUEST_TIMEOUT_S)
    # gcsfs, and fsspec's prefetcher that gcsfs reads files through, log a traceback of every
    # request they give up on and then raise the same error, which unavailable_message reports.
    for name in ("gcsfs", "fsspec.prefetcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
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
        if name in _METADATA_CALLS and hasattr(attribute, "__wrapped__"):
            # fsspec's sync wrapper of an async call takes `timeout` for itself (FSTimeoutError,
            # a TimeoutError, so tried again).
            return lambda *args, **kwargs: _retrying(
                attribute, *args, **{"timeout": CALL_TIMEOUT_S, **kwargs}
            )
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


cli.add_error_reporter(unavailable_message)
