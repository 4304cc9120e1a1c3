"""Writing a model directory for others to load (a Hugging Face export): whole, never mixed with
another model's files, on any disk or bucket, modes as the umask says, under its lock:
`publish.directory(output_dir, lambda scratch: hf.save_hf(model, vocab, scratch))`.
docs/model.md, "Export a training run to Hugging Face": each rule and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from bert_jax import cli, storage
from bert_jax.storage import workdir_lock

MARKER = ".bert_jax_export.json"
_SCRATCH = ".export-tmp-"


def _ours(name: str) -> bool:
    return name in (MARKER, workdir_lock.LOCK_NAME) or name.startswith(
        (_SCRATCH, workdir_lock.LOCK_NAME + ".")
    )


def check_target(output_dir: str, flag: str = "--output_dir") -> None:
    """Refuses an `output_dir` that is a file, lies under one, or holds others' files."""
    cli.refuse_a_file(output_dir, flag)
    if storage.isdir(output_dir):
        previous_export(output_dir, flag)


def previous_export(output_dir: str, flag: str = "--output_dir") -> list[str]:
    """The files of the export of ours that `output_dir` holds; refuses a directory holding
    anything else but hidden files (.gitkeep, .DS_Store: no model's, kept)."""
    names = sorted(n for n in storage.listdir(output_dir) if not (_ours(n) or n.startswith(".")))
    listed: list[str] = []
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        listed = list(json.loads(storage.read_text(storage.join(output_dir, MARKER)))["files"])
    foreign = [n for n in names if n not in listed]
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise cli.UserError(
            f"{flag}={output_dir!r} holds files that are not an export of ours ({shown}); "
            "pass a new or empty directory (an earlier export of ours there is replaced whole)"
        )
    return names


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _open_modes(root: str) -> None:
    mask = _umask()
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~mask)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _write_marker(output_dir: str, files: list[str], complete: bool) -> None:
    record = {"files": sorted(files), "complete": complete, "written": time.time()}
    if storage.is_url(output_dir):
        storage.write_text(storage.join(output_dir, MARKER), json.dumps(record))
        return
    tmp = os.path.join(output_dir, MARKER + ".tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, os.path.join(output_dir, MARKER))


def directory(
    output_dir: str,
    write: Callable[[str], None],
    *,
    what: str = "bert_jax.export",
    flag: str = "--output_dir",
    last: str = "config.json",
) -> list[str]:
    """Runs `write(scratch)`, which fills an empty directory, and publishes what it wrote as
    `output_dir`, `last` (what a reader opens first) last. Returns the names published."""
    check_target(output_dir, flag)
    # The lock makes `output_dir` if it is new, and removes it again if nothing was published.
    with workdir_lock.hold(output_dir, what, flag=flag):
        if storage.is_url(output_dir):
            with tempfile.TemporaryDirectory(prefix="bert_jax-publish-") as scratch:
                with cli.disk_full_is_oserror(scratch):
                    write(scratch)
                return _publish_remote(scratch, output_dir, last, flag)
        old = previous_export(output_dir, flag)
        for name in os.listdir(output_dir):
            if name.startswith(_SCRATCH):  # a killed export's: we hold the lock, it is dead
                _remove(os.path.join(output_dir, name))
        scratch = os.path.join(output_dir, f"{_SCRATCH}{os.getpid()}")
        os.mkdir(scratch)
        try:
            with cli.disk_full_is_oserror(output_dir):  # safetensors says so in its own type
                write(scratch)
            _open_modes(scratch)
            new = sorted(os.listdir(scratch))
            # From here the directory is between two exports: the marker says so first.
            _write_marker(output_dir, sorted(set(old) | set(new)), complete=False)
            for name in old:
                _remove(os.path.join(output_dir, name))
            # `last` goes last, as to a bucket: a kill between two renames leaves a directory
            # every loader refuses, never a model without its tokenizer that transformers loads.
            for name in sorted(new, key=lambda name: name == last):
                os.replace(os.path.join(scratch, name), os.path.join(output_dir, name))
            _write_marker(output_dir, new, complete=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return new


def _publish_remote(local: str, path: str, last: str, flag: str) -> list[str]:
    """The local directory `local` published as the bucket directory `path` (no rename there:
    `last` deleted first and uploaded last, the marker listing both versions meanwhile)."""
    names = sorted(os.listdir(local))
    if last not in names:
        raise ValueError(f"{local} has no {last} to publish last")  # a bug of the writer
    old = previous_export(path, flag)
    _write_marker(path, sorted(set(old) | set(names)), complete=False)
    storage.remove(storage.join(path, last))

    def upload(name: str) -> None:
        with open(os.path.join(local, name), "rb") as f:
            with storage.open_write(storage.join(path, name)) as out:
                shutil.copyfileobj(f, out, 1 << 20)

    for name in names:
        if name != last:
            upload(name)
    for name in sorted(set(old) - set(names)):
        storage.rmtree(storage.join(path, name))  # a directory's objects
        storage.remove(storage.join(path, name))  # or one object
    upload(last)
    _write_marker(path, names, complete=True)
    return names
