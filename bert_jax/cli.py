"""How every binary meets its user: `run` in place of absl's app.run answers a mistake with one
`error: ...` line and exit 2, a bug with its traceback and the BUG line, exit 1, a Ctrl-C with
exit 130. Library code raises UserError naming the file or flag, converting the errors of the
libraries it calls where they arise (`user_path`). The rule, case by case: docs/faults.md. No
JAX import: data_prep binaries use this module."""

import contextlib
import difflib
import errno
import itertools
import logging
import os
import signal
import stat
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator

from absl import app, flags
from absl import logging as absl_logging

FLAGS = flags.FLAGS


class UserError(ValueError):
    """A mistake the user can fix, the message saying what; a ValueError, as checks catch those."""


BUG = "this is a bug in bert_jax: please report it with the traceback above"
NO_SPACE = ("No space left on device", "Disk quota exceeded", "ENOSPC", "EDQUOT", "os error 28")
INTERRUPTED = "interrupted (Ctrl-C); finished work is kept: rerun the same command to go on"
# OSErrors that are the machine's state, reported in one line wherever they come from; any other
# that reaches cli.run is a bug: a user's paths are checked, or converted by `user_path`.
ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)
_PASS_A_CONFIG = "pass a configs/*.py file defining get_config()"


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


def _a_binary_of_ours() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.split(".")[0] in ("bert_jax", "data_prep")


_CTRL_C: dict[str, bool] = {}  # "received" (by _on_ctrl_c), "reported" (by _interrupted_hook)


def _on_ctrl_c(signum, frame) -> None:
    """Python's SIGINT handler, noting that the signal came: a C extension interrupted as it
    loads can turn the KeyboardInterrupt into an ImportError that no longer carries it."""
    _CTRL_C["received"] = True
    raise KeyboardInterrupt


def _interrupted_hook(kind, value, tb, _previous=sys.excepthook) -> None:
    """A Ctrl-C outside `run` (a binary importing JAX, absl parsing flags), or a C extension's
    ImportError that swallowed it, is the same one line and exit 130, not a traceback through the
    import machinery. A user's script that imports ours keeps Python's traceback."""
    interrupt = any(isinstance(e, KeyboardInterrupt) for e in causes(value))
    if not _a_binary_of_ours() or not (interrupt or _CTRL_C):
        _previous(kind, value, tb)
        return
    if not _CTRL_C.get("reported"):
        print(f"error: {INTERRUPTED}", file=sys.stderr, flush=True)
        _CTRL_C["reported"] = True
    if not issubclass(kind, KeyboardInterrupt):
        os._exit(130)


def _unraisable_hook(unraisable, _previous=sys.unraisablehook) -> None:
    """A Ctrl-C landing in a garbage collector's callback (JAX's) is dropped by Python, and the run
    went on: sent again from a thread a moment later (a handler run here would be dropped too)."""
    if _a_binary_of_ours() and isinstance(unraisable.exc_value, KeyboardInterrupt):
        again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
        again.daemon = True
        again.start()
        return
    _previous(unraisable)


sys.excepthook = _interrupted_hook
sys.unraisablehook = _unraisable_hook
if _a_binary_of_ours() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    with contextlib.suppress(ValueError):  # not the main thread: Python's handler stays
        signal.signal(signal.SIGINT, _on_ctrl_c)


def causes(error: BaseException | None, explicit: bool = False) -> list[BaseException]:
    """`error` and its causes and contexts (`explicit`: causes only), outermost first (<= 10)."""
    chain: list[BaseException] = []
    while error is not None and len(chain) < 10 and error not in chain:
        chain.append(error)
        error = error.__cause__ if explicit else error.__cause__ or error.__context__
    return chain


@contextlib.contextmanager
def disk_full_is_oserror(where: str) -> Iterator[None]:
    """A full disk as the OSError(ENOSPC) naming `where` that `message` reports, however a library
    says it (a ValueError saying ENOSPC, safetensors' "os error 28", an OSError naming none)."""
    try:
        yield
    except Exception as e:
        code, text = errno.ENOSPC, "No space left on device"
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            if e.filename:
                raise
            code, text = e.errno, e.strerror or text
        elif not any(
            (isinstance(c, OSError) and c.errno in (errno.ENOSPC, errno.EDQUOT))
            or any(no_space in str(c) for no_space in NO_SPACE)
            for c in causes(e)
        ):
            raise
        raise OSError(code, text, where) from e


@contextlib.contextmanager
def user_path(flag: str, path: str) -> Iterator[None]:
    """An OSError on the path the user gave as `flag` as the UserError naming both (one elsewhere
    stays a bug); not a full disk, nor an error a reporter claims (an unreachable bucket)."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT) or reported(e):
            raise
        where = f" ({e.filename})" if e.filename and str(e.filename) != path else ""
        raise UserError(f"{flag}={path!r}{where}: {e.strerror or e}") from e


def message(error: BaseException) -> str:
    """The one line a user sees for `error`."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" writing {error.filename}" if error.filename else ""
        return (
            f"no space left on the device{where}: free some space and rerun the same "
            "command; finished work is kept"
        )
    if isinstance(error, OSError) and error.strerror and error.filename:
        return f"{error.filename}: {error.strerror}"
    return " ".join(str(error).split()) or type(error).__name__


def not_a_file(path: str) -> str:
    """Why `path` is not a regular file to read, as words that follow its name."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a part of its path is a file, not a directory)"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(mode):
        return (
            "is a named pipe, not a file: it is read more than once (sniffed, then read), so "
            "save what it carries to a file and pass that"
        )
    if not stat.S_ISREG(mode):
        return "is a device or socket, not a file"
    return "is a file"


def refuse_a_file(path: str, flag: str) -> str:
    """UserError naming `flag` for a local directory `path` that is a file or lies under one
    (makedirs would say only "File exists"); else its nearest existing ancestor (a URL as is)."""
    if "://" in path:
        return path
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{flag}={path!r} is a file; pass a directory")
    ancestor = os.path.abspath(path)
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UserError(f"{flag}={path!r}: {ancestor} is a file, not a directory")
    return ancestor


def check_writable_dir(path: str, flag: str) -> None:
    """UserError naming `flag` unless `path` is, or can be made as, a directory we may write:
    before any work, not at its end. A bucket's permissions show at the first write."""
    if "://" in path:
        return
    ancestor = refuse_a_file(path, flag)
    try:  # os.access is not enough: root passes it where the file system refuses (sysfs)
        os.rmdir(tempfile.mkdtemp(prefix=".write-test-", dir=ancestor))
    except OSError as e:
        why = {
            errno.EROFS: "a read-only file system",
            errno.EACCES: "no permission",
            errno.EPERM: "no permission",
        }.get(e.errno, "no files can be made there: a virtual file system such as /proc?")
        raise UserError(
            f"{flag}={path!r}: {ancestor} cannot be written ({e.strerror or e}: {why}); pass a "
            "directory you can write"
        ) from None


def fail(text: str, status: int = 2) -> None:
    """The one line, then the exit; what libraries still print as the process ends is dropped."""
    print(f"error: {text}", file=sys.stderr, flush=True)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    sys.stderr = open(os.devnull, "w")
    sys.exit(status)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        rest = FLAGS(argv)
        _check_config_files()
        return rest
    except (flags.Error, ValueError, OSError) as e:
        # absl's, or a --config file that does not load (an override of one fails on
        # ml_collections' placeholder): the file's own problem is the better line.
        fail(_config_file_problem(argv) or _without_traceback(message(e)))
    except SyntaxError as e:  # a --config file that is not Python (a data file, a YAML file)
        fail(
            f"{e.filename}: not a Python config file ({e.msg}, line {e.lineno}); " + _PASS_A_CONFIG
        )
    except (AttributeError, KeyError, TypeError) as e:
        # ml_collections' for an override of no field, or a --config file without get_config()
        # (an empty file, a JSON file); anything else stays a bug with its traceback.
        problem, given = _unknown_config_field(argv), _given_config_files(argv)
        if not problem and given and isinstance(e, AttributeError) and "get_config" in str(e):
            problem = f"--{given[0][0]}={given[0][1]} defines no get_config(); {_PASS_A_CONFIG}"
        if problem is None:
            raise
        fail(problem)


def _without_traceback(text: str) -> str:
    """The last line of the traceback that ml_collections' error for a get_config that raised
    carries whole (`--config=FILE:ARG` for one that takes no argument)."""
    head, sep, trace = text.partition(" Traceback (most recent call last): ")
    if not sep:
        return text
    return f"{head} {trace.rsplit('^ ', 1)[-1].split(' File ')[-1].strip()}"


def _given_config_files(argv: list[str]) -> list[tuple[str, str]]:
    """(name, file) of each config-file flag `argv` gives a file, with the last file given."""
    given = []
    for name in _config_flags():
        files = [a.split("=", 1)[1] for a in argv[1:] if a.startswith(f"--{name}=")]
        files += [b for a, b in itertools.pairwise(argv) if a == f"--{name}"]
        if files:
            given.append((name, files[-1]))
    return given


def _config_file_problem(argv: list[str]) -> str | None:
    """The line for a --config file in `argv` that is no file, or None."""
    for name, file in _given_config_files(argv):
        path = file.split(":")[0]
        if not os.path.isfile(path):
            where = f"={path} {not_a_file(path)}" if path else " is empty"
            return f"--{name}{where}; {_PASS_A_CONFIG}"
    return None


def _check_config_files() -> None:
    """A --config file that did not load (ml_collections defers that to its use) as the flag's."""
    for name, flag in _config_flags().items():
        if type(flag.value).__name__ == "_ErrorConfig":  # _parse_flags names a missing file
            error = object.__getattribute__(flag.value, "_error")
            raise UserError(f"--{name}: {message(error)}") from error


def _config_flags() -> dict[str, object]:
    """name -> flag of the ml_collections config-file flags (--config=...)."""
    return {
        name: flag
        for name, flag in FLAGS._flags().items()  # absl's registry; no public iterator
        if type(flag.parser).__name__ == "ConfigFileFlagParser"
    }


def _unknown_config_field(argv: list[str]) -> str | None:
    """The line for the first `--config.a.b` override naming no field, or None."""
    config_flags, given = _config_flags(), dict(_given_config_files(argv))
    loaded = {}
    for arg in argv[1:]:
        dotted = arg[2:].split("=")[0]
        name, *path = dotted.split(".")
        if not arg.startswith("--") or not path or name not in config_flags:
            continue
        if name not in given:
            return None
        if name not in loaded:
            try:
                loaded[name] = config_flags[name].parser.parse(given[name])
            except Exception:  # the file itself is broken: absl's own error is the better one
                return None
        problem = no_such_field(loaded[name], path, [name], prefix="--", what="config field")
        if problem:
            return f"--{dotted}: {problem}"
    return None


def no_such_field(
    config, keys: list[str], walked: list[str] = (), prefix: str = "", what: str = "field"
) -> str | None:
    """Where the path `keys` leaves the fields of the ConfigDict `config` (reached by `walked`),
    with the nearest real field (`prefix` before it), or None where every key is a field."""
    node, walked = config, list(walked)
    for key in keys:
        names = list(node.keys()) if hasattr(node, "keys") else []
        if key not in names:
            if not names:
                return f"{'.'.join(walked)} is a value, not a section"
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.5)
            hint = (
                f"did you mean {prefix}{'.'.join([*walked, close[0]])}?"
                if close
                else f"the fields of {'.'.join(walked) or 'the config'} are: "
                f"{', '.join(sorted(names))}"
            )
            return f"no such {what}; {hint}"
        node, walked = node[key], [*walked, key]
    return None


# error -> its one line, or None if not theirs, for libraries that are not ours (storage adds
# the one for an unreachable bucket: registered there, so that this module imports none of ours).
_ERROR_REPORTERS: list[Callable[[BaseException], str | None]] = []


def add_error_reporter(report: Callable[[BaseException], str | None]) -> None:
    if report not in _ERROR_REPORTERS:
        _ERROR_REPORTERS.append(report)


def reported(error: BaseException) -> str | None:
    """The line a registered reporter has for `error`, or None."""
    return next(filter(None, (report(error) for report in _ERROR_REPORTERS)), None)


def run(main: Callable[[list[str]], int | None], *, takes_args: bool = False) -> None:
    """app.run(main), answering a UserError, absl's UsageError, a bad flag, arguments after the
    flags (unless `takes_args`), an error a reporter claims or an OSError of ENVIRONMENT_ERRNOS
    with `error: ...`, exit 2; Ctrl-C with exit 130; anything else as a bug (BUG), exit 1."""

    def wrapped(argv):
        if not FLAGS["verbosity"].present:
            absl_logging.set_verbosity(absl_logging.WARNING)
            logging.getLogger().setLevel(logging.WARNING)
        try:
            if len(argv) > 1 and not takes_args:
                hint = "; use --config.<field>=<value> overrides" if _config_flags() else ""
                raise UserError(f"unexpected arguments {argv[1:]}{hint}")
            return main(argv)
        except (KeyboardInterrupt, Exception) as e:
            if _CTRL_C or any(isinstance(c, KeyboardInterrupt) for c in causes(e)):
                # A Ctrl-C where no save is due (the trainers save on the first), or one that a C
                # extension loading here (JAX's) turned into its ImportError: not a bug.
                if FLAGS.verbosity >= 1:
                    raise
                if _CTRL_C.get("reported"):  # its line is out (_interrupted_hook)
                    sys.exit(130)
                fail(INTERRUPTED, 130)
            text = reported(e)  # e.g. a bucket unreachable through the retries (storage's)
            users = isinstance(e, (UserError, app.UsageError)) or (
                isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS
            )
            if text is None and not users:
                traceback.print_exc()
                fail(f"{type(e).__name__}: {BUG}", 1)
            if FLAGS.verbosity >= 1:
                raise
            fail(text or message(e))

    app.run(wrapped, flags_parser=_parse_flags)
