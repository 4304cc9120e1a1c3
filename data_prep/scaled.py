"""The scaled data_prep job on one machine: worker processes, progress, and a work directory
(resume.py) that makes it resumable; the work itself (job.py) is the Beam job's. A kill or a failed
write loses only the units and shards in flight: docs/data_prep.md, "Resume".
"""

import contextlib
import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from concurrent import futures

import numpy as np
import tqdm

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, record_io
from bert_jax.storage import workdir_lock
from data_prep import job, job_units, output, resume

_worker: dict = {}  # per process: the UnitProcessor and the work directory


def _die_with_parent(main_pid: int) -> None:
    """This worker ends when the job's process dies: no orphan works on (or holds the lock). Linux:
    SIGKILL when its parent dies; a forkserver's worker (whose parent outlives the job) also has a
    thread that watches the job's pid."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != main_pid:

        def watch():
            while True:
                time.sleep(1.0)
                try:
                    os.kill(main_pid, 0)
                except ProcessLookupError:
                    os._exit(1)

        threading.Thread(target=watch, daemon=True).start()


def _init_worker(spec: job.JobSpec, tokenizer, work_dir: str, in_pool: bool, main_pid: int) -> None:
    if in_pool:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool
        _die_with_parent(main_pid)
    _worker["processor"] = job_units.UnitProcessor(spec, tokenizer)
    _worker["work_dir"] = work_dir


@storage.unavailable_as_user_error()
def _unit_task(unit) -> dict:
    """Processes one unit and saves it: records file first, marker last; returns the marker."""
    stat = resume.stat(unit)  # before reading: a write after this shows as another version
    result = _worker["processor"].process(unit)
    work_dir = _worker["work_dir"]
    path = resume.unit_path(work_dir, unit.index, "bin")
    marker = result.marker(stat)
    with storage.open_write(path) as f:
        for split, records in result.splits.items():
            marker[split]["data_at"] = f.tell()
            f.write(records.data)
        for split, records in result.splits.items():
            marker[split]["offsets_at"] = f.tell()
            f.write(records.offsets.astype("<i8").tobytes())
        marker["bin_bytes"] = f.tell()
        if not storage.is_url(path):
            f.flush()
            os.fsync(f.fileno())
    output.write_json_atomic(resume.unit_path(work_dir, unit.index, "json"), marker)
    return marker


@contextlib.contextmanager
def _unit_files(work_dir: str, pieces: list):
    """Per piece, a file open for pread that holds its records, and their [records + 1] int64
    bounds there. From a bucket, each piece is fetched first, one ranged read each (not one
    request per record), into one local temporary file."""
    remote = storage.is_url(work_dir)
    with contextlib.ExitStack() as stack:
        if remote:
            local = stack.enter_context(tempfile.TemporaryFile(prefix="bert_jax_pieces_"))
        located = []
        for unit, data_at, offsets_at, first, end in pieces:
            path = resume.unit_path(work_dir, unit, "bin")
            if not remote:
                fd = os.open(path, os.O_RDONLY)
                stack.callback(os.close, fd)
                raw = os.pread(fd, 8 * (end - first + 1), offsets_at + 8 * first)
                located.append((fd, data_at + np.frombuffer(raw, "<i8")))
                continue
            with storage.open_read(path) as f:
                f.seek(offsets_at + 8 * first)
                offsets = np.frombuffer(f.read(8 * (end - first + 1)), "<i8")
                located.append((local.fileno(), local.tell() - offsets[0] + offsets))
                f.seek(data_at + int(offsets[0]))
                remaining = int(offsets[-1] - offsets[0])
                while remaining > 0:
                    block = f.read(min(remaining, 8 << 20))
                    if not block:
                        raise EOFError(f"{path} ends early: {remaining} bytes missing")
                    local.write(block)
                    remaining -= len(block)
        if remote:
            local.flush()
        yield located


@storage.unavailable_as_user_error()
def _shard_task(task) -> tuple[str, int, dict]:
    """Writes one shard from the unit files in its shuffled order; returns (split, index, entry)."""
    spec, work_dir, output_dir, split, shard, num, pieces = task
    path = storage.join(output_dir, output.shard_name(split, shard, num, spec.fmt))
    with _unit_files(work_dir, pieces) as files, output.local_file(path) as local:
        which = np.repeat(np.arange(len(files)), [len(bounds) - 1 for _, bounds in files])
        starts = np.concatenate([bounds[:-1] for _, bounds in files])
        lengths = np.concatenate([np.diff(bounds) for _, bounds in files])
        order = job.shard_order(spec, split, shard, len(starts))
        with record_io.RecordWriter(local, spec.fmt) as writer:
            for lo in range(0, len(order), 4096):  # Python ints for a slice at a time: flat memory
                chunk = order[lo : lo + 4096]
                for f, start, length in zip(
                    which[chunk].tolist(), starts[chunk].tolist(), lengths[chunk].tolist()
                ):
                    writer.write(os.pread(files[f][0], length, start))
        info = output.shard_entry(local, len(starts))
    output.write_json_atomic(resume.shard_marker(work_dir, split, shard), info)
    return split, shard, info


@contextlib.contextmanager
def _executor(num_workers: int, spec, tokenizer, work_dir: str):
    """An unordered imap over tasks: in this process for one worker, else a pool of processes."""
    if num_workers <= 1:
        _init_worker(spec, tokenizer, work_dir, in_pool=False, main_pid=os.getpid())
        yield map
        return
    # fork is cheapest, but can deadlock a child of a process with other threads (the lock's
    # heartbeat is fork-safe): such a caller gets a forkserver.
    methods = multiprocessing.get_all_start_methods()
    threads = any(
        t is not threading.current_thread() and t.name != workdir_lock.HEARTBEAT_THREAD
        for t in threading.enumerate()
    )
    if "fork" in methods and not threads:
        context = multiprocessing.get_context("fork")
    else:
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    # Unlike multiprocessing.Pool, it fails rather than hangs when a worker dies.
    pool = futures.ProcessPoolExecutor(
        num_workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(spec, tokenizer, work_dir, True, os.getpid()),
    )

    submitted = []

    def imap(fn, tasks):
        batch = [pool.submit(fn, task) for task in tasks]
        submitted.extend(batch)
        try:
            for done in futures.as_completed(batch):
                yield done.result()
        except futures.process.BrokenProcessPool:
            raise cli.UserError(
                f"a worker process of data_prep died (killed: the system's out-of-memory killer, "
                f"or a signal); the finished units and shards are kept: rerun the same command "
                f"to go on (with fewer --num_workers than {num_workers} if memory ran out)"
            ) from None

    try:
        yield imap
    except BaseException as e:
        # Ctrl-C or an error: drop the queued work (here: shutdown(cancel_futures=True) is lost
        # once this frame is collected); units in flight finish.
        if storage.unavailable_message(e):
            # A bucket that stays away: the tasks in flight would each wait out their retries.
            _terminate(pool)
        else:
            for future in submitted:
                future.cancel()
        try:
            # Here a second Ctrl-C is ours (at the interpreter's exit it hung on idle workers).
            pool.shutdown(wait=True)
        except KeyboardInterrupt:  # stop at once: what a unit in flight wrote is never trusted
            _terminate(pool)
            pool.shutdown(wait=True)
        raise
    pool.shutdown()


def _terminate(pool) -> None:
    """Stops the pool's workers (no public API before Python 3.14); their futures then fail."""
    for process in list((pool._processes or {}).values()):
        process.terminate()


def run(
    spec: job.JobSpec,
    tokenizer,
    output_dir: str,
    *,
    num_workers: int = 1,
    flags: dict | None = None,
    progress: bool = True,
    vocab_file: str | None = None,
) -> dict:
    """Runs (or resumes) the job; returns the manifest it writes next to the shards. `vocab_file`:
    the vocabulary as the user named it (not a local copy)."""
    started = time.time()
    output.prepare_output_dir(output_dir)
    planned = job.plan(spec, output_dir)
    vocab = manifest.vocab_entry(tokenizer, file=vocab_file)
    fp = job.fingerprint(spec, planned, vocab)
    work = resume.WorkDir(output_dir)
    finished, damaged = work.finished(spec, planned, fp)
    if finished is not None and not damaged:
        logging.info("%s already holds this job's finished output; nothing to do", output_dir)
        return finished
    with work.running(fp, finished, damaged):
        markers, shards = _run_tasks(
            spec, tokenizer, output_dir, work, planned, num_workers, progress
        )
        result = job.manifest_fields(
            spec,
            fp,
            shards,
            planned,
            markers,
            vocab=vocab,
            flags=flags or {},
            seconds=time.time() - started,
            runner=f"local, {num_workers} worker(s)",
        )
        work.remove_other_shards(shards)
        output.write_json_atomic(storage.join(output_dir, manifest.FILE), result)
    return result


def _run_tasks(spec, tokenizer, output_dir, work, planned, num_workers, progress):
    """Processes the units, then writes the shards, that the work directory lacks; returns every
    unit's marker and every split's shard entries."""
    markers, written = work.drop_untrusted(spec, planned)
    todo = sorted((u for u in planned if u.index not in markers), key=lambda u: -u.size)
    with _executor(min(num_workers, len(planned)), spec, tokenizer, work.path) as imap:
        total = sum(u.size for u in planned)
        unit_bar = tqdm.tqdm(
            total=total,
            initial=total - sum(u.size for u in todo),
            unit="B",
            unit_scale=True,
            desc="units",
            disable=not progress,
            mininterval=0.5,
        )
        documents, unit_start = 0, time.time()
        for marker in imap(_unit_task, todo):
            markers[marker["unit"]["index"]] = marker
            documents += sum(marker[split]["documents"] for split in job.SPLITS)
            unit_bar.set_postfix_str(
                f"{documents / max(time.time() - unit_start, 1e-9):.0f} docs/s", refresh=False
            )
            unit_bar.update(planned[marker["unit"]["index"]].size)
        unit_bar.close()
        markers = [markers[u.index] for u in planned]
        tasks, shards = [], {}
        for split, plan in job.plan_shards(spec, markers).items():
            shards[split] = [written.get((split, shard)) for shard in range(len(plan))]
            for shard, pieces in enumerate(plan):
                if shards[split][shard] is not None:
                    continue
                located = [
                    (u, markers[u][split]["data_at"], markers[u][split]["offsets_at"], a, b)
                    for u, a, b in pieces
                ]
                tasks.append((spec, work.path, output_dir, split, shard, len(plan), located))
        shard_bar = tqdm.tqdm(
            total=sum(map(len, shards.values())), desc="shards", disable=not progress
        )
        shard_bar.update(shard_bar.total - len(tasks))
        for split, shard, info in imap(_shard_task, tasks):
            shards[split][shard] = info
            shard_bar.update(1)
        shard_bar.close()
    return markers, shards
