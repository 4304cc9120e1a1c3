"""The output directory every data_prep mode writes: shard names, atomic writes, statistics, and
the checks of a finished output (shard sizes on a rerun, md5s with --verify). The manifest's
fields are bert_jax/data/contract/manifest.py's.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, record_io, shard_files
from data_prep.inputs import ReadStats


class OutputError(cli.UserError):
    """An output directory that cannot be written."""


def shard_name(split: str, index: int, count: int, fmt: str) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{record_io.suffix(fmt)}"


def prepare_output_dir(output_dir: str, flag: str = "--output_dir") -> None:
    """Creates the directory and proves it is writable before any work is done; `flag` names it."""
    probe = storage.join(output_dir, f".write-test-{os.getpid()}")
    try:
        storage.makedirs(output_dir)
        storage.write_bytes(probe, b"ok")
        storage.remove(probe)
    except OSError as e:  # gcsfs: FileNotFoundError for no bucket, PermissionError for no access
        if storage.unavailable_message(e):
            raise  # the server, not the directory: its own error line
        raise OutputError(f"cannot write to {flag}={output_dir!r}: {e.strerror or e}") from e


def remove_temporaries(folder: str) -> None:
    """Removes killed writers' temporary files from a local `folder` (the caller holds the lock)."""
    for name in os.listdir(folder):
        if manifest.TEMPORARY.search(name):
            os.remove(os.path.join(folder, name))


def write_json_atomic(path: str, obj) -> None:
    """Writes `path` whole or not at all, a failed write leaving no temporary file behind."""
    with storage.open_write(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def read_json(path: str):
    try:
        return json.loads(storage.read_text(path))
    except FileNotFoundError:
        return None


def shard_entry(path: str, instances: int) -> dict:
    return {
        "file": os.path.basename(path),
        "instances": instances,
        "md5": storage.md5(path),
        "bytes": os.path.getsize(path),
    }


@contextlib.contextmanager
def local_file(path: str):
    """A local path to write `path` at: itself, or a temporary file uploaded whole when the block
    ends without an error (ArrayRecord's writer writes local files only)."""
    if not storage.is_url(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bert_jax_") as local_dir:
        local = os.path.join(local_dir, storage.basename(path))
        yield local
        with open(local, "rb") as source, storage.open_write(path) as out:
            shutil.copyfileobj(source, out, 8 << 20)


@dataclasses.dataclass
class InstanceStats:
    instances: int = 0
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    masked: int = 0
    random_next: int = 0
    add = ReadStats.add

    def summary(self, max_seq_length: int) -> dict:
        n = max(self.instances, 1)
        return {
            "instances": self.instances,
            "tokens": self.tokens,
            "mean_tokens_per_instance": self.tokens / n,
            "padding_fraction": 1.0 - self.tokens / (n * max_seq_length),
            "mask_rate": self.masked / max(self.tokens, 1),
            "masked_per_instance": self.masked / n,
            "random_next_fraction": self.random_next / n,
        }


def read_manifest(output_dir: str) -> dict | None:
    """The finished job's manifest as written, or None when the directory holds none."""
    path = storage.join(output_dir, manifest.FILE)
    try:
        return manifest.load(path, missing_ok=True)
    except manifest.ManifestError as e:
        raise OutputError(
            f"{path} is unreadable ({e.problem}); delete it and rerun the job to rebuild the output"
        ) from e


def damaged_shards(output_dir: str, written: dict, check_md5: bool = False) -> dict[str, str]:
    entries = [entry for entries in written["shards"].values() for entry in entries]
    return shard_files.damaged_shards(output_dir, entries, check_md5)


def verify(output_dir: str) -> list[str]:
    """The problems of the shards the manifest lists: size, md5 and record count."""
    try:
        written = read_manifest(output_dir)
        if written is not None:
            manifest.read(output_dir, written)  # every field, as the trainer will read them
    except (OutputError, manifest.ManifestError) as e:
        return [str(e)]
    if written is None:
        return [f"no {manifest.FILE} in {output_dir!r}: the job has not finished there"]
    return list(damaged_shards(output_dir, written, check_md5=True).values())
