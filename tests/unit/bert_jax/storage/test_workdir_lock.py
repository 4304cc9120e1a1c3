"""bert_jax.storage.workdir_lock: one run per directory, locally and in a bucket; stale locks taken
over by exactly one of the runs racing for them."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest

from bert_jax import storage
from bert_jax.storage import workdir_lock
from support import locks
from support.golden import REPO


def _stale_holder(**changes) -> bytes:
    """The lock of a run that was killed: a pid that no longer runs on this host."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = {
        "host": socket.gethostname(),
        "pid": dead.pid,
        "started": time.time() - 100,
        "heartbeat": time.time() - 50,
        "command": "bert_jax.main --config=configs/tiny.py",
        "token": "killed",
        **changes,
    }
    return json.dumps(holder).encode()


@pytest.fixture(params=["local", "bucket"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path)
    return request.getfixturevalue("bucket")


def test_a_second_run_is_refused_naming_the_holder_and_the_lock_goes_at_the_end(root):
    workdir = storage.join(root, "run")
    with workdir_lock.hold(workdir, "bert_jax.main"):
        holder = locks.holder(workdir)
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert holder["command"].startswith("bert_jax.main")
        with pytest.raises(workdir_lock.Busy) as refused:
            with workdir_lock.hold(workdir, "bert_jax.finetune"):
                pytest.fail("two holders")
        text = str(refused.value)
        assert f"--workdir={workdir!r} is in use by bert_jax.main" in text
        assert f"pid {os.getpid()} on {socket.gethostname()}" in text and "\n" not in text
    assert locks.holder(workdir) is None  # released
    with workdir_lock.hold(workdir, "bert_jax.main"):  # and free again
        pass


def test_the_lock_is_released_when_the_block_raises(tmp_path):
    with pytest.raises(KeyboardInterrupt), workdir_lock.hold(str(tmp_path), "x"):
        raise KeyboardInterrupt
    assert locks.holder(str(tmp_path)) is None


def test_a_directory_made_for_the_lock_alone_is_removed_with_it(tmp_path):
    """A run refused before it wrote anything (a bad input file) leaves no empty workdir."""
    with pytest.raises(ValueError), workdir_lock.hold(str(tmp_path / "new"), "x"):
        raise ValueError("bad input")
    assert not os.path.exists(tmp_path / "new")
    with workdir_lock.hold(str(tmp_path / "kept"), "x"):
        (tmp_path / "kept" / "metrics.jsonl").write_text("{}\n")
    assert os.listdir(tmp_path / "kept") == ["metrics.jsonl"]


@pytest.mark.parametrize(
    "changes, stale",
    [
        ({}, True),  # same host, its pid gone
        ({"pid": os.getpid(), "token": "an earlier process"}, True),  # a restarted container
        ({"pid": 1}, False),  # same host, a live pid, a fresh heartbeat
        ({"host": "other-host", "pid": 1}, False),  # another host, a fresh heartbeat
        ({"host": "other-host", "pid": 1, "heartbeat": time.time() - 3600}, True),
        ({"pid": 1, "heartbeat": time.time() - workdir_lock.STALE_AFTER_S - 60}, True),
    ],
    ids=["dead pid", "own pid", "live pid", "other host", "old heartbeat", "live pid but hung"],
)
def test_what_counts_as_stale(tmp_path, changes, stale):
    storage.write_bytes(str(tmp_path / ".lock"), _stale_holder(**changes))
    if not stale:
        with pytest.raises(workdir_lock.Busy, match=r"is in use by bert_jax\.main"):
            with workdir_lock.hold(str(tmp_path), "bert_jax.main"):
                pass
        return
    with workdir_lock.hold(str(tmp_path), "bert_jax.main"):
        assert locks.holder(str(tmp_path))["pid"] == os.getpid()
    assert os.listdir(tmp_path) == []  # neither the lock nor a takeover marker is left


def test_a_killed_holder_not_yet_reaped_is_stale(tmp_path):
    """A driver that kills a run and starts it again before it waits for the first: the killed
    run is a zombie, which signal 0 still finds; the rerun takes its lock over (it was refused
    as "in use" until the driver reaped the dead run)."""
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed.kill()
        deadline = time.time() + 10
        while time.time() < deadline:  # until it is a zombie: dead, not yet waited for
            with open(f"/proc/{killed.pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.01)
        storage.write_bytes(str(tmp_path / ".lock"), _stale_holder(pid=killed.pid))
        with workdir_lock.hold(str(tmp_path), "bert_jax.main"):
            assert locks.holder(str(tmp_path))["pid"] == os.getpid()
    finally:
        killed.wait()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "it is empty"),  # killed between creating the lock and writing it
        (b'{"host": "h", "pi', "it is not JSON"),
        (b"[1, 2]", "it is not a lock of bert_jax"),
        (b'{"host": "h", "pid": "7", "started": 0, "heartbeat": 0}', "no valid pid"),
    ],
    ids=["empty", "cut", "a list", "pid a word"],
)
def test_an_unreadable_lock_is_taken_over_only_when_old(root, content, why):
    """Taken over at once, an unreadable lock let two starting runs both pass (the first's lock
    is empty until it writes it): it is refused, saying when it will be taken over, until it
    was last written STALE_AFTER_S ago."""
    workdir = storage.join(root, "run")
    storage.makedirs(workdir)
    lock = storage.join(workdir, workdir_lock.LOCK_NAME)
    storage.write_bytes(lock, content)
    with pytest.raises(workdir_lock.Busy) as refused:
        with workdir_lock.hold(workdir, "x"):
            pytest.fail("took an unreadable lock written just now")
    text = str(refused.value)
    assert f"{lock} cannot be read (" in text and why in text
    assert "taken over once it is 600 s old" in text
    assert storage.read_bytes(lock) == content  # left as it was
    old = time.time() + workdir_lock.STALE_AFTER_S + 5
    with mock.patch.object(workdir_lock.time, "time", return_value=old):
        with workdir_lock.hold(workdir, "x"):
            assert locks.holder(workdir)["pid"] == os.getpid()


def test_a_lock_being_written_as_it_is_read_is_its_writers(tmp_path):
    """The window the old rule left open: a run finds the lock another run has just created and
    not yet written; it reads again, sees the holder, and is refused."""
    lock = tmp_path / workdir_lock.LOCK_NAME
    lock.write_bytes(b"")
    content = _stale_holder(pid=1, heartbeat=time.time())  # a live pid on this host

    def write_soon():
        time.sleep(0.3)
        lock.write_bytes(content)

    writer = threading.Thread(target=write_soon)
    writer.start()
    try:
        with pytest.raises(workdir_lock.Busy, match=r"is in use by bert_jax\.main"):
            with workdir_lock.hold(str(tmp_path), "x"):
                pytest.fail("two holders")
    finally:
        writer.join()
    assert lock.read_bytes() == content


def test_a_lock_that_is_a_directory_or_unreadable_is_refused_naming_it(tmp_path):
    os.mkdir(tmp_path / ".lock")
    with pytest.raises(workdir_lock.Busy, match=r"\.lock is a directory, not a lock file"):
        with workdir_lock.hold(str(tmp_path), "x", flag="--output_dir"):
            pass
    assert os.path.isdir(tmp_path / ".lock")
    os.rmdir(tmp_path / ".lock")
    (tmp_path / ".lock").write_bytes(_stale_holder())
    with mock.patch.object(storage, "read_versioned", side_effect=PermissionError(13, "no")):
        with pytest.raises(workdir_lock.Busy, match=r"\.lock cannot be read \(no\)"):
            with workdir_lock.hold(str(tmp_path), "x"):
                pass


def test_the_heartbeat_keeps_a_live_lock_fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir_lock, "HEARTBEAT_S", 0.05)
    with workdir_lock.hold(str(tmp_path), "x"):
        first = locks.holder(str(tmp_path))["heartbeat"]
        time.sleep(0.5)
        assert locks.holder(str(tmp_path))["heartbeat"] > first


_RACER = """
import os, sys, time
from bert_jax.storage import workdir_lock
directory, start, refused = sys.argv[1], float(sys.argv[2]), sys.argv[3]
time.sleep(max(0.0, start - time.time()))
try:
    with workdir_lock.hold(directory, "racer"):
        deadline = time.time() + 30  # still holding while the others try, however slow they are
        while len(os.listdir(refused)) < 5 and time.time() < deadline:
            time.sleep(0.05)
        print("won")
except workdir_lock.Busy:
    open(os.path.join(refused, str(os.getpid())), "w").close()
    print("refused")
"""


def test_of_processes_racing_for_a_stale_lock_exactly_one_wins(tmp_path):
    workdir, refused = tmp_path / "run", tmp_path / "refused"
    workdir.mkdir()
    refused.mkdir()
    storage.write_bytes(str(workdir / ".lock"), _stale_holder())
    start = time.time() + 3.0  # all of them started and waiting
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(workdir), str(start), str(refused)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["refused"] * 5 + ["won"], outs
    assert os.listdir(workdir) == []


def test_of_threads_racing_for_a_stale_lock_in_a_bucket_exactly_one_wins(bucket):
    """On GCS: the takeover rests on ifGenerationMatch=0 alone (fake-gcs-server ignores the
    precondition on deletes)."""
    workdir = f"{bucket}/run"
    storage.write_bytes(f"{workdir}/.lock", _stale_holder(host="gone-vm", heartbeat=0))
    results, barrier = [], threading.Barrier(5)

    def race():
        barrier.wait()
        try:
            with workdir_lock.hold(workdir, "racer"):
                time.sleep(1.0)
                results.append("won")
        except workdir_lock.Busy:
            results.append("refused")

    threads = [threading.Thread(target=race) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == ["refused"] * 4 + ["won"], results
    assert not storage.exists(f"{workdir}/.lock")


def test_a_file_where_the_directory_belongs_is_named(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(workdir_lock.cli.UserError, match=r"--workdir=.*a_file' is a file"):
        with workdir_lock.hold(str(tmp_path / "a_file"), "x"):
            pass
    with pytest.raises(workdir_lock.cli.UserError, match=r"a_file is a file, not a directory"):
        with workdir_lock.hold(str(tmp_path / "a_file" / "run"), "x"):
            pass


def test_a_lock_another_thread_of_ours_just_created_is_not_stale(tmp_path):
    """The gap between the lock's creation and hold's bookkeeping: a second thread of the same
    process looking then (same pid) must see a live holder, not a stale lock to take over."""
    create, seen = storage.create_exclusive, []

    def create_then_look(path, content):
        made = create(path, content)
        if made and path.endswith(workdir_lock.LOCK_NAME):
            with pytest.raises(workdir_lock.Busy, match="is in use by"):
                with workdir_lock.hold(str(tmp_path), "second"):
                    pass
            seen.append("refused")
        return made

    with mock.patch.object(storage, "create_exclusive", side_effect=create_then_look):
        with workdir_lock.hold(str(tmp_path), "first"):
            pass
    assert seen == ["refused"]
