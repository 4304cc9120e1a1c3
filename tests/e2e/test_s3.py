"""s3:// through bert_jax.storage (s3fs) against a real S3 API server (moto's, in a thread): the
same calls as on gs:// and the local disk, and a data_prep job with its input, vocabulary and
output in an S3 bucket (byte-identical to a local run's)."""

import gc
import hashlib
import logging
import os
import uuid

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from bert_jax import storage
from data_prep import job, output, scaled


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on localhost, with every client of this process and of the binaries tests
    start pointed at it (botocore reads AWS_ENDPOINT_URL)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    yield env["AWS_ENDPOINT_URL"]
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def bucket(s3):
    import boto3

    name = f"bert-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3).create_bucket(Bucket=name)
    return f"s3://{name}"


def test_read_write_list_glob_and_exclusive_creation(bucket):
    root = storage.join(bucket, "a")
    storage.write_text(storage.join(root, "x.txt"), "héllo")
    with storage.open_write(storage.join(root, "y.bin")) as f:
        f.write(b"\x00\x01" * 1000)
    with pytest.raises(RuntimeError):
        with storage.open_write(storage.join(root, "half.bin")) as f:
            f.write(b"x" * 100)
            raise RuntimeError("the writer died")
    gc.collect()
    assert storage.listdir(root) == ["x.txt", "y.bin"]  # nothing of the writer that died
    assert storage.sizes(root) == {"x.txt": 6, "y.bin": 2000}
    assert storage.read_text(storage.join(root, "x.txt")) == "héllo"
    assert storage.glob(storage.join(root, "*.txt")) == [storage.join(root, "x.txt")]
    assert storage.md5(storage.join(root, "y.bin")) == hashlib.md5(b"\x00\x01" * 1000).hexdigest()
    with storage.open_read(storage.join(root, "y.bin")) as f:
        f.seek(1001)
        assert f.read(3) == b"\x01\x00\x01"
    size, version = storage.version(storage.join(root, "x.txt"))
    storage.write_text(storage.join(root, "x.txt"), "hallo!")
    assert size == 6 and storage.version(storage.join(root, "x.txt"))[1] != version

    lock = storage.join(bucket, "lock")
    assert storage.create_exclusive(lock, b"first")  # If-None-Match: *, which moto checks
    assert not storage.create_exclusive(lock, b"second")
    content, version = storage.read_versioned(lock)
    assert content == b"first" and storage.version(lock)[1] == version
    storage.remove(lock)
    assert storage.read_versioned(lock) is None
    storage.rmtree(root)
    assert storage.sizes(root) == {}


def test_a_data_prep_job_in_an_s3_bucket(bucket, testdata, vocab_file, tok, tmp_path):
    """Input, vocabulary and output in the bucket: the local run's shards, byte for byte; a
    finished job is recognised; --verify's checks pass."""
    url = storage.join(bucket, "in.txt")
    storage.write_bytes(url, (testdata / "pydocs_small.txt").read_bytes())
    remote_vocab = storage.join(bucket, "vocab", "vocab.txt")
    storage.write_bytes(remote_vocab, open(vocab_file, "rb").read())
    settings = dict(dupe_factor=1, block_size_mb=0.05, eval_fraction=0.05, num_shards=3)
    local = scaled.run(
        job.JobSpec(inputs=(str(testdata / "pydocs_small.txt"),), **settings),
        tok,
        str(tmp_path / "local"),
        progress=False,
    )
    spec = job.JobSpec(inputs=(storage.join(bucket, "*.txt"),), **settings)
    os.environ["BERT_JAX_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        tokenizer = job.load_tokenizer(remote_vocab, True)
    finally:
        del os.environ["BERT_JAX_CACHE_DIR"]
    out = storage.join(bucket, "records")
    # One worker, in this process: a pool's forkserver may have been started by an earlier test,
    # before this module pointed the environment at the S3 server.
    manifest = scaled.run(spec, tokenizer, out, progress=False, vocab_file=remote_vocab)
    assert manifest["shards"] == local["shards"] and manifest["vocab"]["file"] == remote_vocab
    for entries in manifest["shards"].values():
        for entry in entries:
            name = entry["file"]
            assert (
                storage.read_bytes(storage.join(out, name))
                == (tmp_path / "local" / name).read_bytes()
            )
    assert sorted(storage.listdir(out)) == sorted(
        [e["file"] for entries in manifest["shards"].values() for e in entries] + ["manifest.json"]
    )
    assert output.verify(out) == []
    assert scaled.run(spec, tokenizer, out, progress=False) == manifest  # nothing to do


def test_s3_errors_are_named_as_gs_and_local_ones_are(bucket):
    """The same words as a local path and gs:// for the same situation (storage.errors)."""
    from bert_jax import cli

    storage.write_text(storage.join(bucket, "dir", "x.txt"), "x")
    assert storage.not_a_file(storage.join(bucket, "nope.txt")) == "does not exist"
    assert storage.not_a_file(storage.join(bucket, "dir")).startswith("is a directory")
    missing = "s3://no-such-bucket-for-this/x.txt"
    assert storage.not_a_file(missing).startswith("does not exist: there is no bucket")
    with pytest.raises(FileNotFoundError) as info:
        storage.read_bytes(storage.join(bucket, "nope.txt"))
    assert cli.reported(info.value) == f"{bucket}/nope.txt does not exist"
    with pytest.raises(storage.StorageError, match="there is no bucket"):
        storage.check_paths({"--output_dir": missing}, outputs=["--output_dir"])
