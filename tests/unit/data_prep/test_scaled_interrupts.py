"""data_prep's pool of worker processes (data_prep/scaled.py, _executor) under Ctrl-C: the units in
flight finish, or, at a second Ctrl-C, are stopped; never a process left waiting."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from data_prep import scaled


def _ignore_ctrl_c(*args, **kwargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as _init_worker's: Ctrl-C is the parent's


def _slow_unit(started: str) -> str:
    open(started, "w").close()
    time.sleep(60)
    return started


def test_a_second_ctrl_c_while_the_units_in_flight_finish_stops_the_workers(tmp_path, monkeypatch):
    """Ctrl-C, then Ctrl-C again a moment later (as people press it): data_prep printed its
    `error: interrupted` line and then hung for good. The pool was shut down without waiting, so
    the interpreter's exit waited for the unit in flight; the second Ctrl-C cut that wait short,
    and the exit then joined workers that waited for work forever. Now the wait is the pool's own,
    and a second Ctrl-C during it stops the workers at once."""
    monkeypatch.setattr(scaled, "_init_worker", _ignore_ctrl_c)
    # The workers are forked (the pool's choice where no other thread runs): this test's own
    # threads (pytest's, the presser's) are not the job's.
    me = threading.current_thread()
    monkeypatch.setattr(scaled.threading, "enumerate", lambda: [me])
    started = tmp_path / "started"
    armed, late = [True], []

    def on_ctrl_c(signum, frame):
        if armed[0]:
            raise KeyboardInterrupt
        late.append(signum)  # a press after the job ended: it did not wait for its units

    def press_twice():
        while not started.exists():
            time.sleep(0.01)
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)

    before = set(multiprocessing.active_children())
    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    presser = threading.Thread(target=press_twice, daemon=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            with scaled._executor(2, None, None, str(tmp_path)) as imap:
                presser.start()
                for _ in imap(_slow_unit, [str(started)]):
                    pass
        armed[0] = False
        presser.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not late
    assert set(multiprocessing.active_children()) <= before  # every worker stopped and reaped
