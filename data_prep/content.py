"""Input content hashes: how a rerun knows its input is what it was (docs/data_prep.md, "Resume").
A unit's hash is the blake2b of every byte its reader reads (None for TFDS: its name and extent
decide), kept beside the size and version its file showed *before* the unit was read.
"""

import hashlib
import os
import time

from bert_jax import storage
from data_prep import inputs
from data_prep import units as units_lib
from data_prep.sentences import DEFAULT_LANGUAGE

RECENT_NS = 2 * 10**9  # an mtime this close to now is not trusted (coarse file system clocks)


def source_key(unit: units_lib.Unit) -> str:
    """How the job names a unit's source: a TFDS split, a URL, an absolute local path."""
    if not units_lib.KINDS[unit.kind].is_file:
        return f"tfds:{unit.path}:{unit.split}"
    return unit.path if "://" in unit.path else os.path.abspath(unit.path)


class _Hashing:
    """A binary file that hashes every byte read() and readline() return; no other way of reading
    (iteration, readinto, a descriptor) is offered: none can bypass the hash."""

    def __init__(self, f, digest):
        self._f, self._digest = f, digest

    def read(self, size=-1):
        data = self._f.read(size)
        self._digest.update(data)
        return data

    def readline(self, size=-1):
        line = self._f.readline(size)
        self._digest.update(line)
        return line

    def readable(self):
        return True

    def __getattr__(self, name):
        # What consumers such as pyarrow's ParquetFile ask besides reading.
        if name in ("closed", "seekable", "seek", "tell", "close"):
            return getattr(self._f, name)
        raise AttributeError(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_documents(
    unit: units_lib.Unit,
    stats: inputs.ReadStats,
    text_field: str,
    tfds_data_dir: str | None,
    language: str = DEFAULT_LANGUAGE,
) -> tuple[list, str | None]:
    """(the unit's documents, its content hash; None when no file was opened). The hash is of
    bytes: a reread that only checks it may leave `language` at its default."""
    digest, opened = hashlib.blake2b(digest_size=16), []

    def hashing_open(path):
        opened.append(path)
        return _Hashing(inputs.open_input(path), digest)

    documents = list(
        units_lib.read_unit(
            unit, stats, text_field, tfds_data_dir, open_binary=hashing_open, language=language
        )
    )
    return documents, digest.hexdigest() if opened else None


def file_stat(path: str) -> dict:
    """A file's size and version: a local file's "mtime_ns" (None when too recent to trust: a
    coarse clock could show it again after another write), a bucket object's "version"."""
    if storage.is_url(path):
        size, version = storage.version(path)
        return {"size": size, "version": version}
    st = os.stat(path)
    recent = time.time_ns() - st.st_mtime_ns < RECENT_NS
    return {"size": st.st_size, "mtime_ns": None if recent else st.st_mtime_ns}


def record(digest: str | None, stat: dict | None) -> dict:
    """What is kept of a processed unit: its hash and its file's `file_stat` before reading."""
    return {"blake2b": digest, **(stat or {"size": None, "mtime_ns": None})}


def _versions(stat: dict) -> dict:
    return {key: value for key, value in stat.items() if key not in ("size", "blake2b")}


def _trusted(recorded: dict, now: dict | None) -> bool | None:
    """True/False when the stat alone decides; None when the content must be rehashed."""
    if now is None or now["size"] != recorded["size"]:
        return False
    if all(v is not None and recorded.get(k) == v for k, v in _versions(now).items()):
        return True
    return None


def unit_changed(
    unit: units_lib.Unit,
    recorded: dict,
    now: dict | None,
    text_field: str,
    tfds_data_dir: str | None,
) -> bool:
    """Whether a unit's input differs from `recorded` (a `record`); `now`: its stat (None: gone)."""
    if recorded.get("blake2b") is None:
        return False  # no content hash: the fingerprint's name and extent decide
    trusted = _trusted(recorded, now)
    if trusted is not None:
        return not trusted
    reread = read_documents(unit, inputs.ReadStats(), text_field, tfds_data_dir)
    return reread[1] != recorded["blake2b"]


def _combined(hashes) -> str:
    return hashlib.blake2b("".join(map(str, hashes)).encode(), digest_size=16).hexdigest()


def input_files(planned: list, records: list) -> dict:
    """The manifest's "inputs": per input file its size, version (None: rehash it on a rerun) and a
    hash over its units' hashes; `records[i]` is unit i's `record`."""
    out: dict = {}
    for unit, rec in zip(planned, records):
        if rec.get("blake2b") is None:
            continue
        stat = {"size": rec["size"], **_versions(rec)}
        entry = out.setdefault(source_key(unit), {**stat, "hashes": []})
        if any(entry.get(key) != value for key, value in stat.items()):
            # The file changed while the job ran: never trust the stat.
            entry.update(dict.fromkeys(_versions(stat)))
        entry["hashes"].append(rec["blake2b"])
    for entry in out.values():
        entry["blake2b"] = _combined(entry.pop("hashes"))
    return out


def changed_inputs(
    planned: list, recorded: dict, text_field: str, tfds_data_dir: str | None
) -> list[str]:
    """The files in a finished job's "inputs" whose content is no longer what it recorded."""
    changed = []
    for key, entry in recorded.items():
        units = [u for u in planned if source_key(u) == key]
        try:
            now = file_stat(units[0].path) if units else None
        except OSError:
            now = None
        trusted = _trusted(entry, now)
        if trusted is None:
            hashes = (
                read_documents(u, inputs.ReadStats(), text_field, tfds_data_dir)[1] for u in units
            )
            trusted = _combined(hashes) == entry["blake2b"]
        if not trusted:
            changed.append(key)
    return changed
