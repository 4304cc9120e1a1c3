"""bert_jax.cli: a user mistake is one `error:` line and exit 2; a bug keeps its traceback."""

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    from absl import flags
    from bert_jax import cli
    flags.DEFINE_string("x", "ok", "what to do")
    flags.DEFINE_integer("n", 1, "a number")
    def main(argv):
        if flags.FLAGS.x == "bad":
            raise ValueError("vocabulary 'q' is not a vocab.txt;\\n pass --vocab_file")
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
    ],
)
def test_user_mistake_is_one_error_line(tmp_path, args, line):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(line), proc.stderr


def test_success_and_bugs_are_untouched(tmp_path):
    ok = _run(tmp_path)
    assert (ok.returncode, ok.stdout) == (0, "done\n")
    bug = _run(tmp_path, "--x=bug")
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "KeyError" in bug.stderr


def test_verbosity_shows_the_traceback_of_a_user_error(tmp_path):
    proc = _run(tmp_path, "--x=bad", "--verbosity=1")
    assert proc.returncode != 0 and "Traceback" in proc.stderr
