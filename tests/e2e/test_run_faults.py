"""Issue 23's run faults, through the binaries as a user meets them: a second run on a busy
workdir or export directory, a stale lock, Ctrl-C (once and twice), SIGKILLed data_prep workers,
full disks (a real one: a small tmpfs) and export directories that are mount points.

Each case asserts the exit status, exactly one `error:` line (naming the file or flag and the
cause) and no traceback, and that the work is resumable: the rerun of the same command finishes,
from where the interrupted one saved. tests/e2e/test_bad_input_sweep.py can fold these cases
in: the cheap ones run in its fork server (tests/support/forkrun.py); the ones that need a signal, a
real process or a mount are real processes and marked slow.

Full disks and mount points need a mount: the command runs in its own user and mount namespace
(`unshare --mount --map-root-user`) over a tmpfs of a few MB; where the system refuses that (no
user namespaces), those cases skip.
"""

import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from bert_jax import checkpointing, manifest, publish, workdir_lock
from support.forkrun import Server
from support.golden import REPO

GOLDEN = os.path.join(REPO, "data_prep", "testdata", "pydocs_small.L128.P20.dupe2.tfrecord")


def train_args(workdir, steps=2, *extra):
    return [
        "--config=configs/tiny.py",
        f"--workdir={workdir}",
        f"--config.data.train_files={GOLDEN}",
        "--config.data.max_seq_length=128",
        "--config.data.max_predictions_per_seq=20",
        "--config.mesh.num_devices=1",
        f"--config.train.num_train_steps={steps}",
        *extra,
    ]


def finetune_args(world, workdir, *extra):
    return [
        "--config=configs/finetune/sst2.py",
        f"--init={world['hf']}",
        f"--workdir={workdir}",
        f"--config.data.train_file={world['tsv']}",
        "--config.mesh.num_devices=1",
        "--config.data.max_seq_length=16",
        *extra,
    ]


def one_error_line(status, err, want_status, names, *, alone=True):
    """The rule every case keeps: `want_status`, one `error:` line naming `names`, no traceback
    (nor asyncio's "Event loop is closed" floods). `alone`: nothing else on stderr."""
    assert "Traceback" not in err and "Event loop is closed" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert status == want_status, (status, err[-3000:])
    assert len(errors) == 1, err[-3000:]
    if alone:
        assert err.count("\n") == 1, err[-3000:]
    for name in [names] if isinstance(names, str) else names:
        assert name in errors[0], f"{errors[0]!r} does not name {name!r}"
    return errors[0]


@pytest.fixture(scope="module")
def server():
    s = Server(REPO)
    yield s
    s.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory, vocab_file, save_checkpoint):
    """A pre-training workdir (steps 2 and 4), a Hugging Face directory and a fine-tuning TSV."""
    from flax import nnx

    from bert_jax import hf
    from bert_jax import model as M
    from configs import tiny

    d = tmp_path_factory.mktemp("run_faults")
    config = tiny.get_config()
    config.data.update(vocab_file=vocab_file, vocab_md5=manifest.file_md5(vocab_file))
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(0))
    for step in (2, 4):
        save_checkpoint(d / "run", model, config, step)
    hf.save_hf(model, vocab_file, str(d / "hf"))
    rows = "".join(f"{w} movie\t{int(w == 'good')}\n" for w in ["good", "bad"] * 16)
    (d / "sst.tsv").write_text("sentence\tlabel\n" + rows)
    return {"d": d, "run": str(d / "run"), "hf": str(d / "hf"), "tsv": str(d / "sst.tsv")}


# --- One run per directory (cheap: forked children) -------------------------------------------


@pytest.mark.parametrize("binary", ["bert_jax.main", "bert_jax.finetune", "bert_jax.export"])
def test_a_second_run_on_a_busy_directory_is_one_line_naming_the_holder(
    world, server, tmp_path, binary
):
    """The issue's case: two runs on one --workdir both exited 0, the checkpoints and the export
    ended up holding the other run's weights and metrics.jsonl interleaved both."""
    busy = str(tmp_path / "busy")
    os.mkdir(busy)
    args = {
        "bert_jax.main": train_args(busy),
        "bert_jax.finetune": finetune_args(world, busy),
        "bert_jax.export": [f"--workdir={world['run']}", f"--output_dir={busy}"],
    }[binary]
    flag = "--output_dir" if binary == "bert_jax.export" else "--workdir"
    with workdir_lock.hold(busy, "the-first-run", flag=flag):
        status, _, err = server.run(binary, args)
        holder = workdir_lock.holder(busy)
    one_error_line(
        status,
        err,
        2,
        [f"{flag}={busy!r} is in use by the-first-run", f"pid {os.getpid()}", socket.gethostname()],
    )
    assert holder["pid"] == os.getpid()  # the holder's lock was left alone
    assert os.listdir(busy) == []  # nothing written by the refused run


def test_a_stale_lock_is_taken_over_and_a_failed_restore_is_one_line(server, tmp_path):
    """A lock left by a killed run is taken over. Then every array file of the checkpoint is
    cut: the restore fails, and the error was buried under TensorStore's "Event loop is closed"
    tracebacks (271 stderr lines, 90 of them, measured on this workdir before the fix)."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = {"host": socket.gethostname(), "pid": dead.pid, "started": 0, "heartbeat": 0}
    (workdir / workdir_lock.LOCK_NAME).write_text(json.dumps({**killed, "command": "x"}))
    status, out, err = server.run("bert_jax.main", train_args(workdir))
    assert status == 0 and "finished at step 2" in out, err[-3000:]
    assert "took over the lock" in err and f"pid {dead.pid}" in err
    assert workdir_lock.holder(str(workdir)) is None  # released at the end

    for folder, _, files in os.walk(workdir / "checkpoints"):
        for name in files:
            if os.path.basename(folder) == "d":  # the arrays' data files
                os.truncate(os.path.join(folder, name), 100)
    status, _, err = server.run("bert_jax.main", train_args(workdir, 4))
    one_error_line(status, err, 2, f"no checkpoint under {workdir}/checkpoints can be restored")


# --- Exports ---------------------------------------------------------------------------------


def test_export_refuses_another_models_files_and_replaces_its_own_whole(world, server, tmp_path):
    """The issue's case: a stale tokenizer.json (200 entries) beside an export of a 30,522-row
    model, which transformers loaded without a word."""
    out = tmp_path / "hf"
    out.mkdir()
    (out / "tokenizer.json").write_text('{"model": {"vocab": {"[PAD]": 0}}}')
    args = [f"--workdir={world['run']}", f"--output_dir={out}", "--step=2"]
    status, _, err = server.run("bert_jax.export", args)
    one_error_line(status, err, 2, [f"--output_dir={str(out)!r}", "tokenizer.json"])
    assert os.listdir(out) == ["tokenizer.json"]  # theirs, kept

    os.remove(out / "tokenizer.json")
    status, stdout, err = server.run("bert_jax.export", args)
    assert status == 0 and "exported step 2" in stdout, err[-3000:]
    # An earlier export of ours that wrote a tokenizer.json: replaced whole, so it goes.
    marker = json.loads((out / publish.MARKER).read_text())
    (out / "tokenizer.json").write_text("{}")
    marker["files"].append("tokenizer.json")
    (out / publish.MARKER).write_text(json.dumps(marker))
    status, stdout, err = server.run("bert_jax.export", args[:2])
    assert status == 0 and "exported step 4" in stdout, err[-3000:]
    names = sorted(os.listdir(out))
    assert names == sorted(
        [publish.MARKER, "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    )
    umask = os.umask(0)
    os.umask(umask)
    for name in names:  # readable by whom the umask allows (safetensors' file was 0600)
        assert stat.S_IMODE(os.stat(out / name).st_mode) == 0o666 & ~umask, name


# --- Mounts: a full disk, a mount point (real processes in a mount namespace) ----------------


def _can_mount() -> bool:
    try:
        return (
            subprocess.run(
                ["unshare", "--mount", "--map-root-user", "true"], capture_output=True, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_mount = pytest.mark.skipif(not _can_mount(), reason="no user/mount namespaces here")


def in_tmpfs(mount: str, size_mb: float, script: str, timeout=600) -> subprocess.CompletedProcess:
    """Runs the shell `script` with a fresh tmpfs of `size_mb` mounted at `mount`, in a mount
    namespace of its own (the tmpfs goes when the script ends)."""
    os.makedirs(mount, exist_ok=True)
    body = f"mount -t tmpfs -o size={int(size_mb * 1024)}k tmpfs {shlex.quote(mount)} && {script}"
    return subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", body],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def python_m(module: str, args: list[str]) -> str:
    return shlex.join([sys.executable, "-m", module, *args])


@pytest.mark.slow
@needs_mount
def test_a_full_disk_during_a_save_is_one_line_without_asyncio_floods(tmp_path):
    """The issue's case: the right error buried under up to 1,581 lines of asyncio "Event loop
    is closed" tracebacks (651 lines for this tiny model before the fix)."""
    disk = str(tmp_path / "disk")
    proc = in_tmpfs(disk, 3, python_m("bert_jax.main", train_args(f"{disk}/run")))
    one_error_line(proc.returncode, proc.stderr, 2, ["no space left", f"{disk}/run/checkpoints"])


@pytest.mark.slow
@needs_mount
def test_export_into_a_mount_point_and_a_full_disk_keeps_the_earlier_export(world, tmp_path):
    """The output directory is itself a mount point (a Docker volume, NFS): the scratch directory
    used to be made beside it, and every export failed with "Invalid cross-device link". Then a
    second export that does not fit beside the first fails with one line and leaves the first
    as it was."""
    out = str(tmp_path / "volume")
    sums = str(tmp_path / "sums")
    export = python_m("bert_jax.export", [f"--workdir={world['run']}", f"--output_dir={out}"])
    script = (
        f"{export} --step=2 && (cd {out} && md5sum *) > {sums}.1 && "
        f"{{ {export} --step=4; echo $? > {sums}.status; }}; (cd {out} && md5sum *) > {sums}.2"
    )
    proc = in_tmpfs(out, 6, script)  # one tiny model's export fits (4.4 MB), two do not
    assert os.path.exists(f"{sums}.2"), proc.stderr[-3000:]
    first = open(f"{sums}.1").read()
    assert "model.safetensors" in first and "vocab.txt" in first, proc.stderr[-3000:]
    status = int(open(f"{sums}.status").read())
    one_error_line(status, proc.stderr, 2, "no space left")
    assert open(f"{sums}.2").read() == first  # the earlier export, untouched


# --- Ctrl-C and killed workers (real processes, real signals) --------------------------------


def start(module: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_again(module: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def signal_at_line(proc, pattern: str, *signals, gap=0.0) -> tuple[str, str]:
    """Sends `signals` (`gap` seconds apart) once a stdout line matches `pattern`; returns
    (stdout, stderr) at the end."""
    head = ""
    for line in proc.stdout:
        head += line
        if re.match(pattern, line):
            for i, signum in enumerate(signals):
                if i:
                    time.sleep(gap)
                proc.send_signal(signum)
            break
    out, err = proc.communicate(timeout=600)
    return head + out, err


@pytest.mark.slow
def test_ctrl_c_in_pre_training_saves_the_step_exits_130_and_the_rerun_resumes(tmp_path):
    """The issue's case: Ctrl-C printed a KeyboardInterrupt traceback and saved nothing."""
    workdir = tmp_path / "run"
    args = train_args(workdir, 12, "--config.train.log_every_steps=1")
    proc = start("bert_jax.main", args)
    out, err = signal_at_line(proc, r"step 3/", signal.SIGINT)
    saved = checkpointing.saved_steps(str(workdir))
    line = one_error_line(proc.returncode, err, 130, "interrupted (Ctrl-C)", alone=False)
    assert len(saved) == 1 and 3 <= saved[0] <= 5 and f"saving step {saved[0]}" in line, out
    assert not os.path.exists(workdir / workdir_lock.LOCK_NAME)
    rerun = run_again("bert_jax.main", args)
    assert rerun.returncode == 0 and f"resuming from {workdir}/checkpoints/{saved[0]}" in (
        rerun.stdout
    ), rerun.stderr[-3000:]
    assert "finished at step 12" in rerun.stdout


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_the_rerun_finishes(tmp_path):
    workdir = tmp_path / "run"
    args = train_args(workdir, 12, "--config.train.log_every_steps=1")
    proc = start("bert_jax.main", args)
    _, err = signal_at_line(proc, r"step 3/", signal.SIGINT, signal.SIGINT, gap=0.05)
    one_error_line(proc.returncode, err, 130, "interrupted", alone=False)
    assert not os.path.exists(workdir / workdir_lock.LOCK_NAME)
    rerun = run_again("bert_jax.main", args)
    assert rerun.returncode == 0 and "finished at step 12" in rerun.stdout, rerun.stderr[-3000:]


@pytest.mark.slow
def test_ctrl_c_in_fine_tuning_finishes_its_save_and_the_rerun_resumes_from_it(world, tmp_path):
    """The issue's case: the in-flight async save was left as a tmp directory and the rerun
    started from step 0."""
    workdir = tmp_path / "ft"
    args = finetune_args(
        world,
        workdir,
        "--config.train.num_epochs=4",  # 16 steps of 8
        "--config.train.batch_size=8",
        "--config.train.log_every_steps=1",
        "--config.checkpoint.every_steps=1",  # an async save in flight at every step
        "--config.eval.at_start=false",
    )
    proc = start("bert_jax.finetune", args)
    _, err = signal_at_line(proc, r"step 5/", signal.SIGINT)
    line = one_error_line(proc.returncode, err, 130, "interrupted (Ctrl-C)", alone=False)
    names = os.listdir(workdir / "checkpoints")
    assert not [n for n in names if "tmp" in n], names  # the save in flight was finished
    last = max(int(n) for n in names if n.isdigit())
    assert last >= 5 and f"saving step {last}" in line
    rerun = run_again("bert_jax.finetune", [*args, "--verbosity=0"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"at step {last}" in rerun.stderr and "finished at step 16" in rerun.stdout


DATA_PREP = [
    f"--input={os.path.join(REPO, 'data_prep', 'testdata', 'pydocs_small.txt')}",
    f"--vocab_file={os.path.join(REPO, 'data_prep', 'testdata', 'bert-base-uncased-vocab.txt')}",
    "--dupe_factor=2",
    "--block_size_mb=0.02",
    "--num_shards=8",
    "--num_workers=2",
    "--progress=false",
]


def shards(directory) -> dict[str, bytes]:
    return {
        n: open(os.path.join(directory, n), "rb").read()
        for n in sorted(os.listdir(directory))
        if re.match(r"^(train|eval)-\d{5}-of-\d{5}\.", n) and ".tmp-" not in n
    }


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


@pytest.fixture(scope="module")
def clean_records(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean_records")
    status, _, err = server.run("data_prep.main", [*DATA_PREP, f"--output_dir={out}"])
    assert status == 0, err
    return shards(out)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["ctrl-c", "worker killed"])
def test_data_prep_interrupted_is_one_line_and_the_rerun_equals_a_clean_run(
    server, clean_records, tmp_path, fault
):
    """The issue's cases: Ctrl-C, and a worker killed by the OOM killer (BrokenProcessPool
    traceback)."""
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-m", "data_prep.main", *DATA_PREP, f"--output_dir={out}"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    units = out / "_work" / "units"
    while proc.poll() is None and not (
        units.is_dir() and sum(n.endswith(".json") for n in os.listdir(units)) >= 2
    ):
        time.sleep(0.01)
    assert proc.poll() is None, "finished before the fault"
    if fault == "ctrl-c":
        proc.send_signal(signal.SIGINT)
        want, names = 130, "interrupted (Ctrl-C)"
    else:
        workers = children(proc.pid)
        assert workers
        os.kill(workers[0], signal.SIGKILL)
        want, names = 2, ["worker process of data_prep died", "rerun the same command"]
    err = proc.communicate(timeout=600)[1]
    one_error_line(proc.returncode, err, want, names)
    assert not (out / "manifest.json").exists()
    status, _, err = server.run("data_prep.main", [*DATA_PREP, f"--output_dir={out}"])
    assert status == 0, err
    assert shards(out) == clean_records
