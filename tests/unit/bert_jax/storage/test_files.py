"""bert_jax.storage against a real GCS API server (fake-gcs-server) and the local disk: the same
calls, the same results, and the promises an object store cannot make by renaming."""

import gc
import hashlib
import logging
import os
import subprocess
import sys

import pytest

from bert_jax import cli, storage


@pytest.fixture(params=["local", "gcs"])
def root(request, tmp_path):
    """A directory on the local disk or a bucket prefix: every test runs on both."""
    if request.param == "local":
        return str(tmp_path)
    return storage.join(request.getfixturevalue("bucket"), "root")


@pytest.fixture
def no_gcsfs_backoff(monkeypatch):
    """gcsfs' retries without their waits (1 + 2 + 4 + 8 + 16 s): its retry count is fixed when
    the class is defined, so the waits are what a test can take out."""
    import asyncio
    import types

    from gcsfs import retry

    real_sleep = asyncio.sleep
    monkeypatch.setattr(retry, "asyncio", types.SimpleNamespace(sleep=lambda _: real_sleep(0)))


def test_write_read_list_glob_remove_on_both(root):
    storage.makedirs(storage.join(root, "a"))
    storage.write_text(storage.join(root, "a", "x.txt"), "héllo")
    with storage.open_write(storage.join(root, "a", "y.bin")) as f:
        f.write(b"\x00\x01" * 1000)
    assert storage.read_text(storage.join(root, "a", "x.txt")) == "héllo"
    assert storage.size(storage.join(root, "a", "y.bin")) == 2000
    assert storage.listdir(storage.join(root, "a")) == ["x.txt", "y.bin"]
    assert storage.glob(storage.join(root, "a", "*.txt")) == [storage.join(root, "a", "x.txt")]
    assert storage.isdir(storage.join(root, "a")) and storage.isfile(
        storage.join(root, "a", "x.txt")
    )
    assert (
        storage.md5(storage.join(root, "a", "y.bin")) == hashlib.md5(b"\x00\x01" * 1000).hexdigest()
    )
    with storage.open_read(storage.join(root, "a", "y.bin")) as f:
        f.seek(1001)
        assert f.read(3) == b"\x01\x00\x01"
    storage.remove(storage.join(root, "a", "x.txt"))
    assert not storage.exists(storage.join(root, "a", "x.txt"))
    storage.rmtree(storage.join(root, "a"))
    assert not storage.exists(storage.join(root, "a", "y.bin"))


@pytest.mark.parametrize("nbytes", [100, 20 << 20])  # one request, and a resumable upload
def test_a_writer_that_fails_leaves_nothing_under_the_name(root, nbytes):
    path = storage.join(root, "half.bin")
    with pytest.raises(RuntimeError):
        with storage.open_write(path) as f:
            f.write(b"x" * nbytes)
            raise RuntimeError("the writer died")
    gc.collect()  # gcsfs would finish an abandoned upload when the file object is collected
    assert not storage.exists(path)
    assert [n for n in (storage.listdir(root) if storage.isdir(root) else [])] == []


def test_exclusive_creation_and_versioned_reads(root):
    lock = storage.join(root, "lock")
    storage.makedirs(root)
    assert storage.create_exclusive(lock, b"first")
    assert not storage.create_exclusive(lock, b"second")
    content, version = storage.read_versioned(lock)
    assert content == b"first"
    storage.write_bytes(lock, b"replaced")  # a rewrite of the name is a new version
    assert storage.read_versioned(lock)[0] == b"replaced"
    assert storage.read_versioned(lock)[1] != version
    # storage.version: the same version, local or in a bucket (masking's vocabulary cache key).
    assert storage.version(lock) == (8, storage.read_versioned(lock)[1])
    storage.remove(lock)
    assert storage.read_versioned(lock) is None
    assert storage.create_exclusive(lock, b"third")


def test_local_copy_is_fetched_once_and_checked(bucket, tmp_path):
    path = storage.join(bucket, "shard.arrayrecord")
    data = os.urandom(3 << 20)
    storage.write_bytes(path, data)
    want = hashlib.md5(data).hexdigest()
    copy = storage.local_copy(path, str(tmp_path), md5_hex=want, nbytes=len(data))
    assert open(copy, "rb").read() == data
    assert storage.local_copy(path, str(tmp_path), md5_hex=want) == copy
    with pytest.raises(storage.StorageError, match="manifest says"):
        storage.local_copy(path, str(tmp_path / "other"), md5_hex="0" * 32)
    assert storage.local_copy(str(tmp_path / "x"), "unused") == str(tmp_path / "x")


def test_unknown_schemes_are_a_user_error():
    with pytest.raises(cli.UserError, match="http:// paths are not supported"):
        storage.exists("http://example.com/x")


def test_an_unreachable_server_is_one_line(gcs, bucket, monkeypatch, no_gcsfs_backoff):
    """What cli.run prints when the retries are spent: not a traceback."""
    path = storage.join(bucket, "x")
    storage.write_bytes(path, b"1")
    monkeypatch.setenv("BERT_JAX_STORAGE_RETRY_S", "0")
    gcs.stop()
    try:
        with pytest.raises(Exception) as info:
            storage.read_bytes(storage.join(bucket, "y"))
    finally:
        gcs.start()
    text = storage.unavailable_message(info.value)
    assert text and "rerun the same command" in text
    assert storage.unavailable_message(ValueError("x")) is None


def test_503s_and_stalls_are_retried_through(gcs, bucket, monkeypatch, no_gcsfs_backoff):
    """Through a proxy that answers 503 and stalls: gcsfs' retries carry the calls through."""
    from support import flaky_proxy

    with flaky_proxy.proxied(gcs.url, monkeypatch) as proxy:
        path = storage.join(bucket, "through-proxy.bin")
        data = os.urandom(1 << 20)
        proxy.fail_next(3)
        storage.write_bytes(path, data)
        proxy.stall_next(1, seconds=1.0)
        proxy.fail_next(2)
        assert storage.read_bytes(path) == data
        assert proxy.injected == 6


def test_a_stall_past_the_request_timeout_is_tried_again(gcs, bucket, monkeypatch):
    """gcsfs gives up at once on a request that times out (it retries 5xx and lost connections
    only): storage tries the whole operation again, reads and writes alike."""
    from support import flaky_proxy

    with flaky_proxy.proxied(gcs.url, monkeypatch, request_timeout=1) as proxy:
        path = storage.join(bucket, "stalled.bin")
        data = os.urandom(3 << 20)
        proxy.stall_next(1, seconds=3)
        with storage.open_write(path) as f:
            f.write(data)
        proxy.stall_next(2, seconds=3)
        with storage.open_read(path) as f:
            f.seek(1 << 20)
            assert f.read() == data[1 << 20 :]
        assert proxy.injected == 3


def test_a_metadata_call_that_never_returns_is_tried_again(gcs, bucket, monkeypatch):
    """A call whose coroutine never finishes, with no request open for gcsfs' request timeout to
    end (seen once: a suite worker waited in isdir for 15 minutes), is cut at CALL_TIMEOUT_S and
    tried again like any transient fault."""
    import asyncio

    from etils.epath import backend

    from bert_jax.storage import remote

    path = storage.join(bucket, "hang", "x")
    storage.write_bytes(path, b"1")
    fs = storage._fs(path)._fs
    real, calls = type(fs)._info, []

    async def hangs_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            await asyncio.Event().wait()  # never set
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(type(fs), "_info", hangs_once)
    # A new instance, whose sync `info` calls the patched `_info` (etils keeps one too).
    type(fs).clear_instance_cache()
    backend.fsspec_backend._get_filesystem.cache_clear()
    monkeypatch.setattr(remote, "CALL_TIMEOUT_S", 1)
    assert storage.isfile(path)
    assert len(calls) >= 2


def test_gs_urls_use_gcsfs_json_api_client_whatever_imported_it_first():
    """gcsfs picks its experimental client (a gRPC control-plane lookup first, which waited
    forever in a suite worker) when it is imported without GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false;
    storage names the JSON-API client for gs:// itself, so import order cannot change it."""
    code = (
        "import gcsfs, fsspec\n"
        "from bert_jax import storage\n"
        "fs = type(storage._fs('gs://b/x')._fs)\n"
        "assert fs.__mro__[1] is gcsfs.core.GCSFileSystem, fs.__mro__\n"
        "assert fsspec.get_filesystem_class('gs') is fs\n"
    )
    env = {**os.environ, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "true"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_server_gone_in_the_middle_of_a_read_is_not_logged(
    gcs, bucket, caplog, monkeypatch, no_gcsfs_backoff
):
    """gcsfs reads a file through fsspec's background prefetcher, which logs the traceback of a
    failed fetch ("Consumer caught an error.") before it raises the same error to the reader;
    the binaries report that error in one line, so the log must not reach stderr (it did in
    data_prep's lasting-outage run: 146 lines above the one `error:` line)."""
    path = storage.join(bucket, "big.bin")
    storage.write_bytes(path, os.urandom(8 << 20))
    monkeypatch.setenv("BERT_JAX_STORAGE_RETRY_S", "0")
    caplog.clear()
    with storage.open_read(path, block_size=1 << 20) as f:
        f.read(1 << 20)
        gcs.stop()
        try:
            with pytest.raises(Exception) as info:
                while f.read(1 << 20):
                    pass
        finally:
            gcs.start()
    assert storage.unavailable_message(info.value)
    logged = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not logged, [f"{r.name}: {r.getMessage()}" for r in logged]
