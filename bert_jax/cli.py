"""How every binary meets its user: one `error: ...` line and exit status 2 for a mistake.

Every absl binary of the project (data_prep.main, data_prep.decode, data_prep.vocab,
bert_jax.main, bert_jax.export, bert_jax.embed, bert_jax.finetune) starts with
`cli.run(main)` instead of `app.run(main)`. Then:

  * a flag that does not parse, a required flag left out, an unknown `--config.x` override:
    `error: <what absl says>` on stderr, exit 2, no usage dump;
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

import errno
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
        except (app.UsageError, *USER_ERRORS) as e:
            if FLAGS.verbosity >= 1:
                raise
            fail(message(e))

    app.run(wrapped, flags_parser=_parse_flags)
