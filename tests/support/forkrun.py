"""Runs the project's binaries as `python -m` would, at a fork's cost instead of a process start.

A process start costs 3-6 s of imports (JAX, Flax, Orbax, ...) on a busy 2-core machine; a sweep
of a hundred bad inputs through the binaries cannot pay that per case. `Server` starts this file
once as a separate process: it imports the heavy libraries (never a binary module, which defines
absl flags at import, and never a JAX backend: the first device use happens in a child), then
answers each request by forking a child that points fd 0/1/2 at /dev/null and two files, sets
sys.argv and runs the module with runpy as `python -m` does, runs the atexit handlers, and exits
with the status the interpreter would give. The server is its own process, not the pytest one,
because pytest's JAX may hold threads (a fork of a threaded process can deadlock).

tests/e2e/test_bad_input_sweep.py checks that a child answers like a real `python -m` process.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HEAVY = (
    "numpy",
    "jax",
    "jax.numpy",
    "flax.nnx",
    "optax",
    "orbax.checkpoint",
    "grain",
    "ml_collections",
    "ml_collections.config_flags",
    "absl.app",
    "tokenizers",
    "sentencepiece",
    "safetensors.numpy",
    "torch",  # pytorch_model.bin files (hf.py): 3-4 s a case otherwise
    "tensorflow_datasets.proto",  # tf.train.Example: every case that reads records, 1-2 s
    "bert_jax.checkpointing",
    "bert_jax.data_contract",
    "bert_jax.config_check",
    "bert_jax.embed",
    "bert_jax.hf",
    "bert_jax.train",
    "bert_jax.finetune.train",
    "bert_jax.finetune.predict",
    "data_prep.scaled",
    "data_prep.readers",
    "data_prep.reference",
)


def _exit_status(code) -> int:
    """The status of `sys.exit(code)` as the interpreter computes it (a text is printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(module: str, args: list[str], cwd: str, out: str, err: str) -> None:
    import atexit
    import runpy
    import traceback

    os.setpgid(0, 0)  # its own process group: a timeout ends the worker processes it starts too
    os.chdir(cwd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)
    sys.path[0] = cwd  # `python -m` puts the working directory first
    sys.argv = [module, *args]
    sys.modules.pop(module, None)  # a library module that is also a binary (bert_jax.embed)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def serve() -> None:
    import importlib

    for name in HEAVY:
        importlib.import_module(name)
    from jax._src import xla_bridge

    assert not xla_bridge.backends_are_initialized(), "a JAX backend before the fork"
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        timeout = request.pop("timeout")
        if pid == 0:
            _child(**request)
        deadline = time.monotonic() + timeout
        while not (done := os.waitpid(pid, os.WNOHANG))[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        if not done[0]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            done = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(done[1])
        print(json.dumps({"status": code if code >= 0 else 128 - code}), flush=True)


class Server:
    """A running fork server; `run(module, args, cwd)` -> (status, stdout, stderr)."""

    def __init__(self, cwd: str):
        self.cwd = cwd
        self.scratch = tempfile.mkdtemp(prefix="forkrun-")
        cache = os.path.join(self.scratch, "jax_cache")
        from support import jax_cache  # here: the server side runs this file as a script

        if os.environ.get("JAX_COMPILATION_CACHE_DIR"):  # the suite's (conftest.py): a head start
            jax_cache.seed(cache, os.environ["JAX_COMPILATION_CACHE_DIR"])
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": cwd,
                # The children compile the same small programs (a model's initialisers, say):
                # the first one compiles, the others read them from this cache.
                "JAX_COMPILATION_CACHE_DIR": cache,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
            },
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the fork server did not start")

    def run(self, module: str, args: list[str], timeout: float = 120) -> tuple[int, str, str]:
        """Status (137 after `timeout` seconds: killed), stdout and stderr of `python -m module
        *args` run in the server's directory."""
        out, err = os.path.join(self.scratch, "out"), os.path.join(self.scratch, "err")
        request = {"module": module, "args": args, "cwd": self.cwd, "out": out, "err": err}
        request["timeout"] = timeout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        status = json.loads(self.proc.stdout.readline())["status"]
        with open(out, errors="replace") as f, open(err, errors="replace") as g:
            return status, f.read(), g.read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.scratch, ignore_errors=True)


if __name__ == "__main__":
    serve()
