"""Runs the project's binaries as `python -m` would, at a fork's cost instead of a process start.

A process start costs 2-3 CPU-s of imports (JAX, Flax, Orbax, ...) before any work, a third of a
short training run's; the bad-input sweep runs hundreds of command lines and the end-to-end tests
about sixty training, export and fine-tuning processes. `Server` starts this file once as a
separate process: it imports the heavy libraries (never a binary module, which defines absl flags
at import, and never a JAX backend: the first device use happens in a child), then answers each
request by forking a child that points fd 0/1/2 at /dev/null and files, takes the caller's
environment (JAX settings read at import are set again from it), sets sys.argv and runs the
module with runpy as `python -m` does, runs the atexit handlers, and exits with the status the
interpreter would give. The server is its own process, not the pytest one, because pytest's JAX
may hold threads (a fork of a threaded process can deadlock).

`Server.run` runs a command to its end; `Server.start` returns a `Child`, which a test reads,
signals, kills and waits for as it would a `subprocess.Popen` (a real process: real signals,
real exit statuses). tests/e2e/test_bad_input_sweep.py checks that a child answers like a real
`python -m` process, and tests/e2e/test_faults.py's kill and signal trials run through it.
"""

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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
    "bert_jax.training.checkpoints",
    "bert_jax.data.contract.data_facts",
    "bert_jax.training.config_check",
    "bert_jax.embed",
    "bert_jax.hf.bert",
    "bert_jax.training.pretrain",
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


def _use_env(env: dict) -> None:
    """The caller's environment, and the JAX settings the server read from its own at import."""
    import jax

    before = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    for key in {*before, *env}:
        name = key.lower()
        if not key.startswith("JAX_") or before.get(key) == env.get(key):
            continue
        if name in jax.config._value_holders and key in env:
            holder = jax.config._value_holders[name]
            parse = getattr(holder, "_parser", None)
            jax.config.update(name, parse(env[key]) if parse else env[key])
    from jax._src import compilation_cache

    compilation_cache.reset_cache()  # its directory is read again at the first compile


def _child(module: str, args: list[str], cwd: str, out: str, err: str, env: dict) -> None:
    import atexit
    import runpy
    import traceback

    os.setpgid(0, 0)  # its own process group: a timeout ends the worker processes it starts too
    # Ctrl-C as a fresh `python -m` typed in a shell has it, whatever the server inherited: a
    # suite started in the background (`make test &`) runs with SIGINT ignored, its children
    # inherit that, and Python keeps an inherited SIG_IGN (as a command run with nohup must).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    _use_env(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    files = {}
    for fd, path in ((1, out), (2, err)):
        if path not in files:
            files[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(files[path], fd)
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
        # The interpreter's exit, in its order: threading's exit callbacks (concurrent.futures
        # tells its pool workers to stop) and the join of non-daemon threads, then atexit's
        # (multiprocessing joins its children). Without the first, a pool's workers wait forever.
        threading._shutdown()
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
    ended: dict[int, int] = {}  # pid -> exit code (Popen's: -N for signal N) of reaped children

    def reap(pid: int, block: bool) -> int | None:
        if pid not in ended:
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            if not done:
                return None
            ended[pid] = os.waitstatus_to_exitcode(status)
        return ended[pid]

    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "start":
            pid = os.fork()
            if pid == 0:
                _child(**request)
            # PIDs wrap (pid_max is 32768 here and every JAX thread takes one): a new child may
            # have the PID of one reaped earlier, whose exit code must not answer for it.
            ended.pop(pid, None)
            reply = {"pid": pid}
        elif op == "poll":
            reply = {"code": reap(request["pid"], block=False)}
        else:  # wait
            pid, deadline = request["pid"], time.monotonic() + request["timeout"]
            while (code := reap(pid, block=False)) is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if code is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            reply = {"code": reap(pid, block=True), "timed_out": code is None}
        print(json.dumps(reply), flush=True)


class _Output:
    """A child's stdout or stderr, read from its file as it grows, like a Popen pipe in text
    mode: iterate for lines as they come (ends when the child has ended), or read() the rest."""

    def __init__(self, child: "Child", path: str):
        self.child, self.file = child, open(path, errors="replace")

    def readline(self) -> str:
        pending = ""
        while True:
            pending += self.file.readline()
            if pending.endswith("\n"):
                return pending
            if self.child.poll() is not None:  # ended: what is left is all there is
                return pending + self.file.read()
            time.sleep(0.01)

    def __iter__(self):
        while line := self.readline():
            yield line

    def read(self) -> str:
        while self.child.poll() is None:
            time.sleep(0.02)
        return self.file.read()

    def close(self) -> None:
        self.file.close()
        os.remove(self.file.name)  # one server serves a worker's whole session


class Child:
    """A binary running in a forked child: pid, poll(), wait(timeout), send_signal(), kill(),
    communicate(timeout), returncode (negative for a signal), and stdout and stderr objects
    (None unless captured) as a text-mode `subprocess.Popen` has them."""

    def __init__(self, server: "Server", pid: int, out: str | None, err: str | None):
        self.server, self.pid, self.returncode = server, pid, None
        self.stdout = _Output(self, out) if out else None
        self.stderr = _Output(self, err) if err and err != out else None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server._ask({"op": "poll", "pid": self.pid})["code"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; after `timeout` seconds the child is killed and TimeoutExpired raised."""
        if self.returncode is None:
            reply = self.server._ask({"op": "wait", "pid": self.pid, "timeout": timeout or 3600})
            self.returncode = reply["code"]
            if reply["timed_out"]:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        self.wait(timeout)
        texts = tuple(o.read() if o else None for o in (self.stdout, self.stderr))
        for o in (self.stdout, self.stderr):
            if o:
                o.close()
        return texts


class Server:
    """A running fork server in directory `cwd`: `run(module, args)` -> (status, stdout, stderr),
    `start(module, args, ...)` -> a `Child`. Its children take the caller's environment at the
    request (os.environ, or `env`), so they use the suite's compilation cache (conftest.py)."""

    def __init__(self, cwd: str):
        self.cwd = cwd
        self.scratch = tempfile.mkdtemp(prefix="forkrun-")
        self._count = itertools.count()
        self._lock = threading.Lock()  # one request and its reply at a time (a reader thread)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": cwd},
        )
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the fork server did not start")

    def _ask(self, request: dict) -> dict:
        with self._lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def start(
        self,
        module: str,
        args: list[str],
        *,
        env: dict | None = None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) -> Child:
        """`python -m module *args` in the server's directory, begun: as subprocess.Popen with
        text=True and these stdout/stderr (PIPE, DEVNULL, or STDOUT for stderr)."""
        n = next(self._count)
        paths = {}
        for name, how in (("out", stdout), ("err", stderr)):
            if how == subprocess.PIPE:
                paths[name] = os.path.join(self.scratch, f"{n}.{name}")
                open(paths[name], "w").close()  # there for the reader before the child starts
            elif how == subprocess.STDOUT:
                paths[name] = paths["out"]
            else:
                assert how == subprocess.DEVNULL, how
                paths[name] = os.devnull
        request = {"op": "start", "module": module, "args": args, "cwd": self.cwd, **paths}
        request["env"] = dict(os.environ if env is None else env)
        pid = self._ask(request)["pid"]
        captured = [p if p != os.devnull else None for p in (paths["out"], paths["err"])]
        return Child(self, pid, *captured)

    def run(self, module: str, args: list[str], timeout: float = 120) -> tuple[int, str, str]:
        """Status (137 after `timeout` seconds: killed), stdout and stderr of `python -m module
        *args` run to its end."""
        child = self.start(module, args)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            code = child.returncode
        out, err = child.communicate()
        return (code if code >= 0 else 128 - code), out, err

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.scratch, ignore_errors=True)


if __name__ == "__main__":
    serve()
