"""One run per directory: the lock that pre-training, fine-tuning and export take on the directory
they write (a --workdir, an export's --output_dir) before they write anything.

    with workdir_lock.hold(workdir, "bert_jax.main"):
        ...  # nobody else writes here until the block ends

`<dir>/.lock` is a small JSON file naming its holder: host, pid, start time, the command line,
a random token, and a heartbeat time. A second run on the same directory finds it and stops
with one line naming the holder (cli.UserError). The file is created exclusively
(storage.create_exclusive: O_CREAT|O_EXCL on a local or NFS disk, ifGenerationMatch=0 in a GCS
bucket), so of two runs starting at once exactly one gets it. The holder removes it when the
block ends: normally, on an exception, on SIGTERM/SIGINT (the trainers turn both into a save and
a normal return, bert_jax.faults).

A lock left behind by a run that was killed (kill -9, OOM, a lost VM) is stale:
  * same host, and its pid is not running (or is this very process: a container restarted
    with the same host name reuses small pids): stale at once;
  * otherwise (another host: NFS, a bucket) its heartbeat is older than STALE_AFTER_S. The
    holder rewrites the lock every HEARTBEAT_S from a daemon thread, so a live run's lock is
    never older than that, give or take a stalled file server.
A stale lock is taken over safely, resting on exclusive creation alone (fake-gcs-server, the
GCS server the tests use, ignores preconditions on deletes): the taker exclusively creates
`<dir>/.lock.takeover-<version>`, named after the stale lock's version (a GCS generation, a
local inode and mtime), checks that the lock is still that version and only then replaces it.
Of several takers racing for one stale lock only one creates that marker; a taker that reads
the lock after it was replaced sees a new version, and a live holder.

Multi-host runs: process 0 takes the lock for the whole job (`primary=True` there, False
elsewhere; bert_jax.faults.hold_workdir tells every process the outcome).

No JAX import: data_prep can use this module.
"""

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


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def refuse_a_file(directory: str, flag: str) -> None:
    """A local `directory` that is a file, or lies under one: a UserError naming it (makedirs
    would say only "File exists" or "Not a directory")."""
    if storage.is_url(directory):
        return
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise cli.UserError(f"{flag}={directory!r} is a file; pass a directory")
    ancestor = os.path.dirname(os.path.abspath(directory))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise cli.UserError(f"{flag}={directory!r}: {ancestor} is a file, not a directory")


def describe(holder: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    return (
        f"{holder.get('command', '?')} (pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {started})"
    )


def stale_reason(holder: dict, now: float | None = None) -> str | None:
    """Why the run named by `holder` (a lock's content) is gone, or None if it may be running."""
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname():
        pid = holder.get("pid")
        if pid == os.getpid():
            if holder.get("token") not in _HELD:  # an earlier process with our pid
                return f"its process {pid} on this host is not running"
        elif not isinstance(pid, int) or not _pid_running(pid):
            return f"its process {pid} on this host is not running"
    age = now - float(holder.get("heartbeat", 0))
    if age > STALE_AFTER_S:
        return (
            f"its heartbeat is {age:.0f} s old (a live holder refreshes it every "
            f"{HEARTBEAT_S:.0f} s)"
        )
    return None


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
        self._thread: threading.Thread | None = None
        self.made_directory = False

    def _content(self) -> bytes:
        return json.dumps(self.holder, sort_keys=True).encode()

    def acquire(self, directory_flag: str) -> None:
        refuse_a_file(self.directory, directory_flag)
        # A directory made only to hold the lock goes with it: a run refused before it wrote
        # anything (a bad flag, a bad input file) leaves no empty workdir behind.
        self.made_directory = not storage.is_url(self.directory) and not os.path.isdir(
            self.directory
        )
        with cli.user_path(directory_flag, self.directory):  # a read-only file system, say
            storage.makedirs(self.directory)
        for _ in range(20):  # each round ends in a lock of ours or a live holder; rarely repeats
            if storage.create_exclusive(self.path, self._content()):
                return
            found = storage.read_versioned(self.path)
            if found is None:
                continue  # released meanwhile
            content, version = found
            try:
                holder = json.loads(content)
            except ValueError:  # a lock cut by a full disk, an empty file: nobody can hold it
                holder = {}
            reason = stale_reason(holder) if holder else "it is unreadable"
            if reason is None:
                raise Busy(
                    f"{directory_flag}={self.directory!r} is in use by {describe(holder)}: one "
                    "run per directory. Wait for it to end or use another directory (a lock "
                    f"left by a killed run is taken over when {self.path} is stale: its process "
                    f"is gone, or its heartbeat is over {STALE_AFTER_S:.0f} s old)"
                )
            if self._take_over(version):
                cli.warn(f"took over the lock {self.path} left by {describe(holder)}: {reason}")
                return
            time.sleep(0.05)  # another taker is replacing it: read it again
        raise Busy(f"{self.path}: could not take the lock (it keeps changing); rerun")

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

    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name=HEARTBEAT_THREAD, daemon=True)
        self._thread.start()

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
        try:
            return json.loads(found[0]).get("token") == self.holder["token"]
        except ValueError:
            return False

    def release(self, reachable: bool = True) -> None:
        """`reachable` False: the run ended because its bucket stayed unreachable; releasing
        would wait out the storage retries again (minutes), so the lock is left to be taken
        over (its pid is gone) by the rerun."""
        self._stop.set()
        if self._thread is not None:
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
def hold(
    directory: str, what: str, *, primary: bool = True, flag: str = "--workdir"
) -> Iterator[None]:
    """Holds `directory`'s lock for the block (see the module docstring); `what` names the
    program in the lock (shown to a second run), `flag` the flag that named the directory. Only
    the `primary` process of a multi-host job takes it; the others hold nothing."""
    if not primary:
        yield
        return
    lock = _Lock(directory, what)
    lock.acquire(flag)
    _HELD.add(lock.holder["token"])
    lock.start_heartbeat()
    reachable = True
    try:
        yield
    except Exception as e:
        reachable = storage.unavailable_message(e) is None
        raise
    finally:
        lock.release(reachable)
        _HELD.discard(lock.holder["token"])


def holder(directory: str) -> dict | None:
    """The content of `directory`'s lock, or None if nobody holds it."""
    found = storage.read_versioned(storage.join(directory, LOCK_NAME))
    if found is None:
        return None
    try:
        return json.loads(found[0])
    except ValueError:
        return {}
