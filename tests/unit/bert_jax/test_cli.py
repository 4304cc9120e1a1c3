"""bert_jax.cli: a user mistake is one `error:` line and exit 2; a bug (any exception that is not
a cli.UserError, a plain ValueError included) keeps its traceback and asks to be reported."""

import subprocess
import sys
import textwrap

import pytest

from bert_jax import cli
from support.golden import REPO

PROGRAM = textwrap.dedent("""
    from absl import flags
    from bert_jax import cli
    flags.DEFINE_string("x", "ok", "what to do")
    flags.DEFINE_integer("n", 1, "a number")
    def main(argv):
        if flags.FLAGS.x == "bad":
            raise cli.UserError("vocabulary 'q' is not a vocab.txt;\\n pass --vocab_file")
        if flags.FLAGS.x == "value":
            raise ValueError("an invariant of ours broke")
        if flags.FLAGS.x == "disk":
            raise OSError(28, "No space left on device", "/out/shard")
        if flags.FLAGS.x == "bug":
            raise KeyError("k")
        print("done")
    cli.run(main)
""")


def _run(tmp_path, *args):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, line",
    [
        (["--x=bad"], "error: vocabulary 'q' is not a vocab.txt; pass --vocab_file"),
        (["--n=abc"], "error: flag --n=abc: invalid literal for int() with base 10: 'abc'"),
        (["--nope=1"], "error: Unknown command line flag 'nope'"),
        (["--x=disk"], "error: no space left on the device writing /out/shard"),
        (["corpus.txt"], "error: unexpected arguments ['corpus.txt']"),  # not silently ignored
    ],
)
def test_user_mistake_is_one_error_line(tmp_path, args, line):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(line), proc.stderr


def test_success_is_untouched_and_a_bug_shows_its_traceback_and_asks_for_a_report(tmp_path):
    ok = _run(tmp_path)
    assert (ok.returncode, ok.stdout) == (0, "done\n")
    for flag, kind in (("--x=bug", "KeyError"), ("--x=value", "ValueError")):
        bug = _run(tmp_path, flag)
        assert bug.returncode == 1 and bug.stdout == "", bug
        assert bug.stderr.startswith("Traceback") and f"{kind}: " in bug.stderr, bug.stderr
        assert bug.stderr.splitlines()[-1] == f"error: {kind}: {cli.BUG}", bug.stderr


# A real binary (data_prep.decode, run as `python -m` runs it) whose storage.local_copy, which
# its main calls, raises: a plain ValueError is a bug of ours, a cli.UserError the user's.
BINARY = textwrap.dedent("""
    import runpy, sys
    from bert_jax import cli, storage
    def local_copy(path, *args, **kwargs):
        raise {error}("{{}}: the error raised".format(path))
    storage.local_copy = local_copy
    sys.argv = ["data_prep.decode", "--input=shard.tfrecord", "--vocab_file={vocab}"]
    runpy.run_module("data_prep.decode", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("error", ["ValueError", "cli.UserError"])
def test_a_binary_reports_a_plain_value_error_as_a_bug_and_a_user_error_in_one_line(
    tmp_path, testdata, error
):
    program = BINARY.format(error=error, vocab=testdata / "bert-base-uncased-vocab.txt")
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    lines = proc.stderr.splitlines()
    if error == "ValueError":
        assert proc.returncode == 1 and proc.stdout == "", proc
        assert lines[0] == "Traceback (most recent call last):", proc.stderr
        assert 'data_prep/decode.py", line' in proc.stderr, proc.stderr  # where it came from
        assert "ValueError: shard.tfrecord: the error raised" in lines, proc.stderr
        assert lines[-1] == f"error: ValueError: {cli.BUG}", proc.stderr
    else:
        assert (proc.returncode, proc.stdout) == (2, ""), proc
        assert lines == ["error: shard.tfrecord: the error raised"], proc.stderr


def test_verbosity_shows_the_traceback_of_a_user_error(tmp_path):
    proc = _run(tmp_path, "--x=bad", "--verbosity=1")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_an_unwritable_directory_is_described_by_why_it_cannot_be_written(tmp_path):
    """The issue's case: /proc/self/... (no files can be made there: ENOENT) was called a
    read-only file system."""
    with pytest.raises(cli.UserError) as e:
        cli.check_writable_dir("/proc/self/out", "--output_dir")
    message = str(e.value)
    assert message.startswith("--output_dir='/proc/self/out': /proc/self cannot be written (")
    assert "read-only" not in message and "a virtual file system such as /proc" in message
    cli.check_writable_dir(str(tmp_path / "new" / "out"), "--output_dir")  # makeable: fine


# A Ctrl-C outside cli.run, as a binary of ours imports its libraries (JAX's: seconds), in the
# shapes it took at random moments of `python -m bert_jax.embed` and data_prep.main: the
# KeyboardInterrupt itself, a C extension's import failing after reporting it (numpy's
# PyErr_Print) or after dropping it (numpy's import of datetime), the former inside cli.run too
# (bert_jax.main imports JAX in its main, where it was "a bug in bert_jax"), and one
# raised inside a garbage collector's callback (JAX's), which Python drops and the run went on.
_EARLY = {
    "raised": "raise KeyboardInterrupt",
    "an extension's import": (
        "sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)\n"
        "raise ImportError('numpy._core.multiarray failed to import')"
    ),
    "an extension's import, the interrupt dropped": (
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    pass\n"
        "raise ImportError('PyCapsule_Import could not import module \"datetime\"')"
    ),
    "an extension's import inside cli.run": (
        "def main(argv):\n"
        "    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)\n"
        "    raise ImportError('numpy._core.multiarray failed to import')\n"
        "cli.run(main)"
    ),
    "in a gc callback": (
        "once = [KeyboardInterrupt]\n"
        "gc.callbacks.append(lambda phase, info: exec('if once: raise once.pop()'))\n"
        "gc.collect()\n"
        "time.sleep(5)\n"  # the interrupt sent again comes within 0.05 s; a user's script sleeps on
        "print('went on')"
    ),
}


@pytest.mark.parametrize("how", list(_EARLY))
@pytest.mark.parametrize("whose", ["binary", "user script"])
def test_a_ctrl_c_while_a_binary_imports_is_the_one_line(how, whose):
    """Before: a traceback through the import machinery, or, for the gc callback, an "Exception
    ignored" traceback and no interrupt. A user's own script importing ours keeps Python's way."""
    spec = "types.SimpleNamespace(name='bert_jax.embed')" if whose == "binary" else "None"
    program = (
        "import gc, os, signal, sys, time, types\n"
        # Python's own Ctrl-C handling, as in a terminal (a job started in the background by a
        # shell inherits SIGINT ignored)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"sys.modules['__main__'].__spec__ = {spec}\n"
        "from bert_jax import cli\n" + _EARLY[how]
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    if whose == "user script":
        assert "Traceback" in proc.stderr and "error: interrupted" not in proc.stderr, proc
        return
    assert proc.stderr.splitlines() == [f"error: {cli.INTERRUPTED}"], proc
    assert proc.returncode != 0 and "went on" not in proc.stdout, proc


CONFIG_FILE_MISTAKES = [
    # (--config value, overrides, the line): a file without get_config() was an AttributeError
    # traceback (exit 1); a file that is none, given with an override, ml_collections' words
    # ("Configuration is not available ... config_config ..."); a get_config(ARG) that takes none,
    # a line holding that error's whole traceback.
    ("{tmp}/empty.py", [], "--config={tmp}/empty.py defines no get_config()"),
    ("{tmp}/data.json", [], "--config={tmp}/data.json defines no get_config()"),
    ("configs/__init__.py", ["--config.train.seed=3"], "--config=configs/__init__.py defines no"),
    ("{tmp}/none.py", ["--config.train.seed=3"], "--config={tmp}/none.py does not exist;"),
    ("{tmp}", ["--config.train.seed=3"], "--config={tmp} is a directory, not a file;"),
    ("", ["--config.train.seed=3"], "--config is empty;"),
    (
        "configs/tiny.py:extra",
        [],
        "flag --config=configs/tiny.py:extra: Error whilst parsing config file: TypeError: "
        "get_config() takes 0 positional arguments but 1 was given",
    ),
]


@pytest.mark.parametrize("config, overrides, line", CONFIG_FILE_MISTAKES)
@pytest.mark.parametrize("binary", ["bert_jax.main", "bert_jax.finetune"])
def test_a_config_file_that_does_not_load_is_one_line_naming_it(
    tmp_path, forkserver, binary, config, overrides, line
):
    (tmp_path / "empty.py").write_text("")
    (tmp_path / "data.json").write_text('{"a": [1, 2]}\n')
    config, line = config.format(tmp=tmp_path), line.format(tmp=tmp_path)
    args = [f"--config={config}", *overrides, f"--workdir={tmp_path / 'run'}"]
    status, stdout, stderr = forkserver.run(binary, args)
    assert (status, stdout) == (2, ""), stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith(f"error: {line}"), stderr
    assert "Traceback" not in stderr and not (tmp_path / "run").exists()
