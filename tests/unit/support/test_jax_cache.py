"""tests/support/jax_cache.py: a worker adopts the other workers' finished compilation-cache
entries, never a cut one or one still being written."""

import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from support import jax_cache


def _new_entry(cache, scale: float) -> str:
    """A real entry: a program compiled now, into the worker's cache (conftest.py)."""
    before = set(os.listdir(cache))
    jax.jit(lambda x: jnp.sin(x) * scale + 1.0)(np.arange(7.0)).block_until_ready()
    (name,) = set(os.listdir(cache)) - before
    return name


def _age(path, seconds=60):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_adopts_whole_settled_entries_by_hard_link_and_never_cut_or_fresh_ones(tmp_path):
    worker = os.environ["JAX_COMPILATION_CACHE_DIR"]
    name = _new_entry(worker, 41.0)
    other = tmp_path / "popen-gw7" / "jax_cache"  # another worker's directory
    other.mkdir(parents=True)
    data = open(os.path.join(worker, name), "rb").read()
    for entry, body in {
        "whole-cache": data,
        "cut-cache": data[: len(data) // 2],
        "empty-cache": b"",
        "fresh-cache": data,
        "whole-atime": data,  # not an entry (eviction's access times)
    }.items():
        (other / entry).write_bytes(body)
        if entry != "fresh-cache":
            _age(other / entry)
    mine = tmp_path / "popen-gw0" / "jax_cache"
    (tmp_path / "popen-gw0").mkdir()
    adopter = jax_cache.Adopter(mine, lambda: jax_cache.worker_dirs(mine))
    assert jax_cache.worker_dirs(mine) == [other]  # mine is made by the first adopt()
    assert jax_cache.worker_dirs(tmp_path / "jax_cache") == [tmp_path / "jax_cache"]  # no xdist
    assert adopter.adopt() == 1
    assert sorted(os.listdir(mine)) == ["whole-cache"]
    assert os.stat(mine / "whole-cache").st_ino == os.stat(other / "whole-cache").st_ino
    # Once settled, the entry that was being written is adopted; the cut ones never are.
    _age(other / "fresh-cache")
    assert adopter.adopt() == 1 and sorted(os.listdir(mine)) == ["fresh-cache", "whole-cache"]
    assert adopter.adopt() == 0


def test_a_process_reads_an_adopted_entry_instead_of_compiling(tmp_path):
    """Seeded into another directory, an entry serves another process: the key holds no path
    (conftest.py: jax_persistent_cache_enable_xla_caches)."""
    worker = os.environ["JAX_COMPILATION_CACHE_DIR"]
    name = _new_entry(worker, 43.0)
    _age(os.path.join(worker, name))
    private = tmp_path / "private"
    jax_cache.seed(private, worker)
    seeded = set(os.listdir(private))
    assert name in seeded
    code = (
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax._src import monitoring\n"
        "hits = []\n"
        "monitoring.register_event_listener("
        "lambda e, **kw: hits.append(e) if e == '/jax/compilation_cache/cache_hits' else None)\n"
        "jax.jit(lambda x: jnp.sin(x) * 43.0 + 1.0)(np.arange(7.0)).block_until_ready()\n"
        "print(len(hits))\n"
    )
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(private)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "1", out.stderr[-3000:]
    assert set(os.listdir(private)) == seeded  # read, not compiled again
