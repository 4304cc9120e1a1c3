"""How every binary meets its user: one `error: ...` line and exit status 2 for a mistake.

Every absl binary of the project (data_prep.main, data_prep.decode, data_prep.vocab,
bert_jax.main, bert_jax.export, bert_jax.embed, bert_jax.finetune) starts with
`cli.run(main)` instead of `app.run(main)`. Then:

  * a flag that does not parse, a required flag left out: `error: <what absl says>` on stderr,
    exit 2, no usage dump; an unknown `--config.x.y` override: `error: --config.x.y: no such
    config field; did you mean --config.x.z?` (the nearest valid name);
  * an exception of a type in USER_ERRORS escaping `main` (a bad path, a bad value, a file
    that is not what it claims to be): `error: <its message>`, exit 2, no traceback. Library
    code raises these with a message that names the file or flag and says what to fix;
  * a full disk (ENOSPC) or a quota: `error: no space left ...`, exit 2; writers keep finished
    work and never leave a partial file under a final name, so a rerun after freeing space
    goes on;
  * anything else is a bug: the traceback is printed as usual. With --verbosity=1 or more a
    user error prints its traceback too, for a bug report.

Library INFO logs (absl, Orbax, Grain, JAX) stay off unless the user passes --verbosity
(e.g. --verbosity=0 for INFO), so an error is not buried under a screen of progress lines.
No JAX import here: data_prep binaries use this module.
"""

import difflib
import errno
import itertools
import logging
import sys
from collections.abc import Callable

from absl import app, flags
from absl import logging as absl_logging

FLAGS = flags.FLAGS


class UserError(ValueError):
    """A mistake the user can fix; the message says what to fix. Raise it (or a subclass, or one
    of USER_ERRORS) from library code; binaries turn it into one `error:` line."""


# Exception types that mean "bad input or setting", never "bug". ValueError covers the many
# validation errors in library code (ConfigDict, BertConfig, data_prep's JobSpec, ...); OSError
# covers missing files and permissions. KeyError and TypeError stay bugs.
USER_ERRORS = (
    UserError,
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    OSError,
)


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
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def fail(text: str, status: int = 2) -> None:
    print(f"error: {text}", file=sys.stderr, flush=True)
    sys.exit(status)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return FLAGS(argv)
    except flags.Error as e:
        fail(message(e))
    except USER_ERRORS as e:  # a --config file that does not load, say
        fail(message(e))
    except SyntaxError as e:  # a --config file that is not Python (a data file, a YAML file)
        fail(
            f"{e.filename}: not a Python config file ({e.msg}, line {e.lineno}); pass a "
            "configs/*.py file defining get_config()"
        )
    except (AttributeError, KeyError, TypeError):
        # ml_collections' config_flags raises these for an override of a field that does not
        # exist; anything else stays a bug with its traceback.
        problem = _unknown_config_field(argv)
        if problem is None:
            raise
        fail(problem)


def _config_flags() -> dict[str, object]:
    """name -> flag of the ml_collections config-file flags (--config=...)."""
    return {
        name: flag
        for name, flag in FLAGS._flags().items()  # absl's registry; no public iterator
        if type(flag.parser).__name__ == "ConfigFileFlagParser"
    }


def _unknown_config_field(argv: list[str]) -> str | None:
    """`--config.a.b: no such config field; did you mean --config.a.c?` for the first override
    in `argv` that names no field of its config file, or None if every one does."""
    config_flags = _config_flags()
    loaded = {}
    for arg in argv[1:]:
        if not arg.startswith("--") or "." not in arg.split("=")[0]:
            continue
        dotted = arg[2:].split("=")[0]
        name, *path = dotted.split(".")
        if name not in config_flags:
            continue
        if name not in loaded:
            files = [a.split("=", 1)[1] for a in argv[1:] if a.startswith(f"--{name}=")]
            files += [b for a, b in itertools.pairwise(argv) if a == f"--{name}"]
            if not files:
                return None
            try:
                loaded[name] = config_flags[name].parser.parse(files[-1])
            except Exception:  # the file itself is broken: absl's own error is the better one
                return None
        node, walked = loaded[name], [name]
        for key in path:
            keys = list(node.keys()) if hasattr(node, "keys") else []
            if key not in keys:
                if not keys:
                    return f"--{dotted}: {'.'.join(walked)} is a value, not a section"
                close = difflib.get_close_matches(key, keys, n=1, cutoff=0.5)
                hint = (
                    f"did you mean --{'.'.join([*walked, close[0]])}?"
                    if close
                    else f"the fields of {'.'.join(walked)} are: {', '.join(sorted(keys))}"
                )
                return f"--{dotted}: no such config field; {hint}"
            node, walked = node[key], [*walked, key]
    return None


def _quiet_libraries() -> None:
    if not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)
        logging.getLogger().setLevel(logging.WARNING)


def run(main: Callable[[list[str]], int | None]) -> None:
    """app.run(main) with the behaviour in the module docstring."""

    def wrapped(argv):
        _quiet_libraries()
        try:
            return main(argv)
        except Exception as e:
            from bert_jax import storage  # a bucket that stayed unreachable through the retries

            text = storage.unavailable_message(e)
            if text is None and not isinstance(e, (app.UsageError, *USER_ERRORS)):
                raise
            if FLAGS.verbosity >= 1:
                raise
            if text is not None:
                print(f"error: {text}", file=sys.stderr, flush=True)
                _drop_later_reports()
                sys.exit(2)
            fail(message(e))

    app.run(wrapped, flags_parser=_parse_flags)


def _drop_later_reports() -> None:
    """After the one line for an unreachable bucket, the storage clients' background work (the
    other writes of the failed checkpoint, TensorStore's callbacks into an event loop that is
    closing) still ends, each with a traceback on stderr as the interpreter exits: the same
    failure again. stderr goes to /dev/null from here on."""
    import os

    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    sys.stderr = open(os.devnull, "w")
