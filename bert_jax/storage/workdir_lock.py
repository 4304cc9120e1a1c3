"""One run per directory (`hold`): `<dir>/.lock`, a JSON file naming its holder, made by exclusive
creation, rewritten every HEARTBEAT_S, taken over when stale through a marker created exclusively.
What is stale, unreadable or refused, and why: docs/training.md, "The workdir". No JAX import."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator

from bert_jax import cli, storage

LOCK_NAME = ".lock"
HEARTBEAT_S = 60.0
STALE_AFTER_S = 600.0  # ten missed heartbeats
# The name of the heartbeat's thread. It is safe to fork beside (data_prep's workers): it waits
# on an Event and, once a minute, rewrites one small file; a child holds none of its state.
HEARTBEAT_THREAD = "workdir-lock-heartbeat"
_HELD: set[str] = set()  # tokens of the locks this process holds now


class Busy(cli.UserError):
    """Another live run holds the directory's lock."""


def pid_running(pid: int) -> bool:
    """Whether process `pid` of this host is alive (a zombie is not; another user's is)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    # A killed run its parent has not yet reaped (a driver script rerunning a job it killed) is a
    # zombie: signal 0 still finds it, yet it holds nothing and never will again.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal's answer
    return state not in (b"Z", b"X")


def describe(holder: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    return (
        f"{holder.get('command', '?')} (pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {started})"
    )


def stale_reason(holder: dict) -> str | None:
    """Why the run named by `holder` (a lock's content) is gone, or None if it may be running."""
    if holder.get("host") == socket.gethostname():
        pid = holder.get("pid")
        if pid == os.getpid():
            if holder.get("token") not in _HELD:  # an earlier process with our pid
                return f"its process {pid} on this host is not running"
        elif not isinstance(pid, int) or not pid_running(pid):
            return f"its process {pid} on this host is not running"
    age = time.time() - float(holder.get("heartbeat", 0))
    if age > STALE_AFTER_S:
        return (
            f"its heartbeat is {age:.0f} s old (a live holder refreshes it every "
            f"{HEARTBEAT_S:.0f} s)"
        )
    return None


_FIELDS = {"host": str, "pid": int, "started": (int, float), "heartbeat": (int, float)}
_SETTLE_S = 1.0  # how long an unreadable lock is read again before it counts as unreadable


def _holder_of(content: bytes) -> dict | str:
    """A lock's content as its holder, or why it is no lock of ours (words)."""
    if not content.strip():
        return "it is empty"
    try:
        holder = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        return "it is not JSON"
    if not isinstance(holder, dict):
        return "it is not a lock of bert_jax"
    wrong = [k for k, kind in _FIELDS.items() if not isinstance(holder.get(k), kind)]
    if wrong or isinstance(holder.get("pid"), bool):
        return f"it is not a lock of bert_jax (no valid {', '.join(wrong) or 'pid'})"
    return holder


def _read(path: str, where: str) -> tuple[dict | str, str] | None:
    """(holder, or why it cannot be read; its version) of the lock at `path`, or None; read again
    for up to _SETTLE_S while unreadable (its creator may be writing it)."""
    if not storage.is_url(path) and os.path.isdir(path):
        raise Busy(
            f"{where}: {path} is a directory, not a lock file; remove it if no run uses this "
            "directory (the lock is a file naming the run that holds the directory)"
        )
    deadline = time.monotonic() + _SETTLE_S
    while True:
        try:
            found = storage.read_versioned(path)
        except PermissionError as e:
            raise Busy(
                f"{where}: its lock {path} cannot be read ({e.strerror or e}), so whether a run "
                "holds the directory is unknown; fix its permissions or delete it if no run uses "
                "the directory"
            ) from None
        if found is None:
            return None
        holder = _holder_of(found[0])
        if not isinstance(holder, str) or time.monotonic() > deadline:
            return holder, found[1]
        time.sleep(0.05)


class _Lock:
    def __init__(self, directory: str, what: str):
        self.path = storage.join(directory, LOCK_NAME)
        self.directory = directory
        now = time.time()
        self.holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": now,
            "heartbeat": now,
            "command": " ".join([what, *sys.argv[1:]]),
            "token": uuid.uuid4().hex,
        }
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=HEARTBEAT_THREAD, daemon=True)
        self.made_directory = False

    def _content(self) -> bytes:
        return json.dumps(self.holder, sort_keys=True).encode()

    def acquire(self, directory_flag: str) -> None:
        storage.parse(self.directory, directory_flag)  # `gs://` alone, `gs:/x`: one line
        cli.refuse_a_file(self.directory, directory_flag)
        url = storage.is_url(self.directory)
        if url:  # before the lock's upload says "404" at the end
            storage.check_bucket(self.directory, directory_flag)
        # A directory made only to hold the lock goes with it: a run refused before it wrote
        # anything (a bad flag, a bad input file) leaves no empty workdir behind.
        self.made_directory = not url and not os.path.isdir(self.directory)
        with cli.user_path(directory_flag, self.directory):  # a read-only file system, say
            storage.makedirs(self.directory)
        where = f"{directory_flag}={self.directory!r}"
        for _ in range(20):  # each round ends in a lock of ours or a live holder; rarely repeats
            with cli.user_path(directory_flag, self.directory):
                if storage.create_exclusive(self.path, self._content()):
                    return
            found = _read(self.path, where)
            if found is None:
                continue  # released meanwhile
            holder, version = found
            if isinstance(holder, str):  # unreadable: stale only once nobody rewrote it
                reason = self._unreadable_reason(holder, where)
            else:
                reason = stale_reason(holder)
                if reason is None:
                    raise Busy(
                        f"{where} is in use by {describe(holder)}: one run per directory. Wait "
                        "for it to end or use another directory (a lock left by a killed run is "
                        f"taken over when {self.path} is stale: its process is gone, or its "
                        f"heartbeat is over {STALE_AFTER_S:.0f} s old)"
                    )
            if self._take_over(version):
                left_by = "a run" if isinstance(holder, str) else describe(holder)
                cli.warn(f"took over the lock {self.path} left by {left_by}: {reason}")
                return
            time.sleep(0.05)  # another taker is replacing it: read it again
        raise Busy(
            f"{where}: could not take its lock {self.path}: it kept changing, or another run "
            f"was taking it over ({self.path}.takeover-*: left by a run killed as it took the "
            "lock over, if it stays; delete it then); rerun"
        )

    def _unreadable_reason(self, why: str, where: str) -> str:
        """Why a lock that cannot be read (`why`) may be taken over, or Busy: only once it was last
        written over STALE_AFTER_S ago, as for a heartbeat (its writer may be starting now)."""
        age = time.time() - storage.modified(self.path)
        if age > STALE_AFTER_S:
            return (
                f"it cannot be read ({why}) and was last written {age:.0f} s ago (a live holder "
                f"rewrites it every {HEARTBEAT_S:.0f} s)"
            )
        raise Busy(
            f"{where}: its lock {self.path} cannot be read ({why}): a run may be starting there "
            f"right now, or one was killed as it wrote the lock. It is taken over once it is "
            f"{STALE_AFTER_S:.0f} s old (in {STALE_AFTER_S - age:.0f} s); if no run uses the "
            "directory, delete the lock and rerun"
        )

    def _take_over(self, version: str) -> bool:
        marker = f"{self.path}.takeover-{version.replace(':', '-')}"
        if not storage.create_exclusive(marker, self._content()):
            return False  # another taker won this version
        try:
            found = storage.read_versioned(self.path)
            if found is not None and found[1] != version:
                return False  # replaced since we read it (its holder's heartbeat, a taker)
            storage.write_bytes(self.path, self._content())
            return True
        finally:
            storage.remove(marker)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(Exception):  # a refresh missed is retried next time
                if not self._still_ours():
                    logging.error("the lock %s was taken over by another run", self.path)
                    return
                self.holder["heartbeat"] = time.time()
                storage.write_bytes(self.path, self._content())

    def _still_ours(self) -> bool:
        found = storage.read_versioned(self.path)
        if found is None:
            return False
        holder = _holder_of(found[0])
        return not isinstance(holder, str) and holder.get("token") == self.holder["token"]

    def release(self, reachable: bool = True) -> None:
        """`reachable` False (the run ended on an unreachable bucket): the lock is left for the
        rerun to take over, not released through minutes of retries."""
        self._stop.set()
        self._thread.join(None if reachable else 0)
        if not reachable:
            return
        with contextlib.suppress(Exception):  # never hide the error that ended the run
            if self._still_ours():
                storage.remove(self.path)
        if self.made_directory:
            with contextlib.suppress(OSError):
                os.rmdir(self.directory)  # only if empty


@contextlib.contextmanager
def hold(directory: str, what: str, *, flag: str = "--workdir") -> Iterator[None]:
    """Holds `directory`'s lock for the block; `what` names the program, shown to others."""
    lock = _Lock(directory, what)
    # Ours before it exists: another thread of this process must not find it stale (our pid).
    _HELD.add(lock.holder["token"])
    try:
        lock.acquire(flag)
    except BaseException:
        _HELD.discard(lock.holder["token"])
        raise
    lock._thread.start()
    reachable = True
    try:
        yield
    except Exception as e:
        reachable = storage.unavailable_message(e) is None
        raise
    finally:
        lock.release(reachable)
        _HELD.discard(lock.holder["token"])
