r"""The scaled data_prep job with its input and output on the local disk or in a bucket: what the
bucket costs, side by side in one invocation.

  python -m bench.bucket_bench   # pydocs.txt (3.6 MB), bert-base-uncased, L=128, dupe_factor=1

The bucket is fake-gcs-server on localhost (tests/support/fake_gcs.py, objects on the local disk):
the figures measure this project's bucket path (gcsfs requests, uploads of whole files, ranged reads
of unit records for the shards, the lock and markers), not a real bucket's network. Each run is a
fresh `python -m data_prep.main` process, timed end to end; the best of --repeats runs, CPU
seconds (the process tree's user+sys) beside wall seconds. The machine may be shared: print the
load average with the figures.
"""

import os
import subprocess
import sys
import tempfile
import time
import uuid

import psutil
from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

FLAGS = flags.FLAGS
flags.DEFINE_string("input", os.path.join(REPO, "examples/data/pydocs.txt"), "Corpus.")
flags.DEFINE_string(
    "vocab_file", os.path.join(REPO, "data_prep/testdata/bert-base-uncased-vocab.txt"), "Vocab."
)
flags.DEFINE_integer("num_workers", 2, "Worker processes of each job.")
flags.DEFINE_integer("repeats", 2, "Runs per setting; the best is reported.")


def _run(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process tree) of one data_prep.main run."""
    start = time.perf_counter()
    proc = psutil.Popen(
        [sys.executable, "-m", "data_prep.main", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        for p in [proc, *proc.children(recursive=True)]:
            try:
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system + times.children_user + times.children_system
            except psutil.Error:
                pass
        time.sleep(0.05)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"data_prep failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, sum(cpu.values())


def main(argv):
    del argv
    from bert_jax import storage
    from support import fake_gcs

    with tempfile.TemporaryDirectory(prefix="bucket_bench_") as tmp:
        server = fake_gcs.Server(os.path.join(tmp, "gcs"))
        server.start()
        try:
            env = {**os.environ, **server.env()}
            os.environ.update(server.env())
            bucket = server.create_bucket(f"bench-{uuid.uuid4().hex[:8]}")
            remote_input = storage.join(bucket, "corpus", os.path.basename(FLAGS.input))
            with open(FLAGS.input, "rb") as f:
                storage.write_bytes(remote_input, f.read())
            settings = {
                "local -> local": (FLAGS.input, lambda i: os.path.join(tmp, f"out{i}")),
                "gs:// -> local": (remote_input, lambda i: os.path.join(tmp, f"out-g{i}")),
                "gs:// -> gs://": (remote_input, lambda i: storage.join(bucket, f"out{i}")),
            }
            results = {}
            for name, (source, out) in settings.items():
                runs = []
                for i in range(FLAGS.repeats):
                    args = [
                        f"--input={source}",
                        f"--vocab_file={FLAGS.vocab_file}",
                        f"--output_dir={out(i)}",
                        "--dupe_factor=1",
                        f"--num_workers={FLAGS.num_workers}",
                        "--progress=false",
                    ]
                    runs.append(_run(args, env))
                results[name] = min(runs)
        finally:
            server.stop()
    size = os.path.getsize(FLAGS.input) / 1e6
    base = results["local -> local"][0]
    print(
        f"{os.path.basename(FLAGS.input)} ({size:.1f} MB), {FLAGS.num_workers} workers, "
        f"best of {FLAGS.repeats}; load average {os.getloadavg()[0]:.1f}"
    )
    for name, (wall, cpu) in results.items():
        print(f"  {name:15s} {wall:6.1f} s wall ({wall / base:.2f}x)  {cpu:6.1f} s CPU")


if __name__ == "__main__":
    app.run(main)
