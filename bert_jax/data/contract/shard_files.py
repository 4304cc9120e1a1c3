"""The shard files of a run's data: which files config.data.train_files / eval_files name
(`find_shards`: what manifests list, never a directory listing) and the one check of a finished
shard (`shard_problem`). No JAX import. docs/training.md, "The data contract".
"""

import dataclasses
import fnmatch
import os
from collections.abc import Sequence

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, record_io


@dataclasses.dataclass(frozen=True)
class Shards:
    """Record files of one split, with what their manifest says about each (None without)."""

    files: list[str]
    instances: list[int] | None
    md5: list[str] | None
    manifests: list[dict]
    nbytes: list[int | None] | None  # each file's size as listed (None where a manifest has none)


def _unfinished(names: list[str]) -> bool:
    """Whether a directory holding `names` is a data_prep output whose job has not finished."""
    return manifest.WORK_DIR in names or any(
        manifest.SHARD_NAME.match(n) or manifest.TEMPORARY.search(n) for n in names
    )


def _unfinished_error(directory: str) -> cli.UserError:
    return cli.UserError(
        f"{directory} holds data_prep shards but no {manifest.FILE}: its data_prep job has not "
        f"finished (killed, or still running), so its shards are not all there. Rerun the same "
        f"`python -m data_prep.main ... --output_dir={directory}` command to finish it (or copy "
        f"the job's {manifest.FILE} beside copied shards)"
    )


def find_shards(patterns: str | Sequence[str], split: str = "train") -> Shards:
    """The record files of comma-separated directories (their `split`) or globs `patterns`."""
    given = patterns.split(",") if isinstance(patterns, str) else patterns
    items = [storage.expand(p.strip()) for p in given if p and p.strip()]
    if not items:
        raise cli.UserError(
            "no record files given: set config.data.train_files to a data_prep --output_dir "
            "(or to globs of TFRecord files)"
        )
    files, instances, md5s, nbytes, manifests = [], [], [], [], {}
    listed = []  # the files a manifest names, which must be there
    described = True
    for item in items:
        is_dir = storage.isdir(item)
        directory = item if is_dir else storage.dirname(item)
        path = storage.join(directory, manifest.FILE)
        if path in manifests or storage.isfile(path):  # each manifest read once
            m = manifests[path] = manifests.get(path) or manifest.read(path)
            for entry in _listed(item, m, split, is_dir):
                listed.append(storage.join(m["dir"], entry["file"]))
                files.append(listed[-1])
                instances.append(int(entry["instances"]))
                md5s.append(entry["md5"])
                nbytes.append(entry.get("bytes"))
            continue
        described = False
        if is_dir:
            if _unfinished(storage.listdir(item)):
                raise _unfinished_error(item)
            raise cli.UserError(
                f"{item} has no {manifest.FILE}: point config.data.train_files at a data_prep "
                "--output_dir, or name record files with a glob (e.g. '/data/part-*.tfrecord')"
            )
        matches = storage.glob(item)
        names = [storage.basename(p) for p in matches]
        if storage.isdir(directory) and _unfinished(names + storage.listdir(directory)):
            raise _unfinished_error(directory)
        matches = [p for p in matches if storage.isfile(p)]
        if not matches:
            if not storage.is_url(item) and os.path.exists(item):  # a pipe, a device: say so
                raise cli.UserError(f"{item} {cli.not_a_file(item)}")
            raise cli.UserError(f"no record files match {item!r}")
        files += matches
    missing = _missing(listed)
    if missing:
        raise cli.UserError(
            f"{missing[0]} is listed in {storage.join(storage.dirname(missing[0]), manifest.FILE)} "
            "but missing: the data_prep output is incomplete; rerun its data_prep command to "
            "rewrite the shard, or restore the file"
        )
    seen: dict[str, str] = {}  # one spelling per file (./, //, a relative path, a link)
    for f in files:
        real = storage.real_path(f)
        if real in seen:
            also = f" (also as {f})" if seen[real] != f else ""
            raise cli.UserError(
                f"{patterns!r} names the record file {seen[real]} twice{also}: its records would "
                "be read twice an epoch; name each shard once"
            )
        seen[real] = f
    if not described:
        instances = md5s = nbytes = None
    return Shards(files, instances, md5s, list(manifests.values()), nbytes)


def _missing(files: list[str]) -> list[str]:
    """The files that are not there, by one listing per directory (not a request per shard)."""
    listed = {
        directory: set(storage.listdir(directory)) if storage.isdir(directory) else set()
        for directory in dict.fromkeys(map(storage.dirname, files))
    }
    return [f for f in files if storage.basename(f) not in listed[storage.dirname(f)]]


def _listed(item: str, m: dict, split: str, is_dir: bool) -> list[dict]:
    """The manifest entries `item` (the directory, or a glob in it) selects."""
    if is_dir:
        entries = m["shards"][split]
        if not entries:
            raise cli.UserError(
                f"{m['path']} lists no {split} shards"
                + (" (the job ran with --eval_fraction=0)" if split == "eval" else "")
            )
        return entries
    pattern = storage.basename(item)
    chosen = {
        s: [e for e in m["shards"][s] if fnmatch.fnmatch(e["file"], pattern)] for s in m["shards"]
    }
    if chosen["train"] and chosen["eval"]:
        raise cli.UserError(
            f"{item!r} matches both train and eval shards of {m['path']}; name the directory "
            f"for its {split} split, or a glob such as {storage.join(m['dir'], split + '-*')!r}"
        )
    entries = chosen["train"] or chosen["eval"]
    if not entries:
        names = [e["file"] for s in m["shards"] for e in m["shards"][s]]
        raise cli.UserError(
            f"{item!r} matches none of the shards {m['path']} lists ({', '.join(names[:4])}"
            f"{', ...' if len(names) > 4 else ''}); name the directory {m['dir']!r} instead"
        )
    return entries


def shard_problem(
    directory: str, entry: dict, check_md5: bool = False, sizes: dict | None = None
) -> str | None:
    """What is wrong with a finished shard (a manifest entry), naming it; None if nothing."""
    path = storage.join(directory, entry["file"])
    size = (storage.sizes(directory) if sizes is None else sizes).get(entry["file"])
    if size is None:
        return f"{entry['file']}: missing"
    if entry.get("bytes") is not None and size != entry["bytes"]:
        return f"{entry['file']}: {size} bytes, {entry['bytes']} expected (truncated or changed)"
    if check_md5:
        # A GCS object's md5 is the one its server computed from the bytes it stores (no download).
        if storage.md5(path) != entry["md5"]:
            return f"{entry['file']}: md5 differs from the manifest (corrupt or changed)"
        try:  # counting reads every record: a shard in a bucket is fetched into the local cache
            local = storage.local_copy(path, md5_hex=entry["md5"])
            with storage.reported_as(local, path):
                count = record_io.count_records(local)
        except ValueError as e:
            return f"{entry['file']}: {e}"
        if count != entry["instances"]:
            return (
                f"{entry['file']}: holds {count} records, the manifest lists "
                f"{entry['instances']} (the manifest is wrong or was edited)"
            )
    return None


def damaged_shards(directory: str, entries: list[dict], check_md5: bool = False) -> dict[str, str]:
    """{file: shard_problem} of the `entries` (all in `directory`) that have one."""
    sizes = storage.sizes(directory)  # one listing, not a request per shard
    problems = ((e["file"], shard_problem(directory, e, check_md5, sizes)) for e in entries)
    return {name: problem for name, problem in problems if problem}


def verify(shards: Shards) -> None:
    """config.data.verify_md5: shard_problem of every listed shard, as data_prep's --verify."""
    if shards.md5 is None:  # no manifest lists them
        return
    by_dir: dict[str, list[dict]] = {}
    for path, count, md5, nbytes in zip(shards.files, shards.instances, shards.md5, shards.nbytes):
        entry = {"file": storage.basename(path), "instances": count, "md5": md5, "bytes": nbytes}
        by_dir.setdefault(storage.dirname(path), []).append(entry)
    for directory, entries in by_dir.items():
        for problem in damaged_shards(directory, entries, check_md5=True).values():
            raise cli.UserError(
                f"{storage.join(directory, problem)}; rerun data_prep to rewrite it"
            )


def check_disjoint(train: Shards, evals: Shards) -> None:
    """Refuses train and eval shards that share a file, under any name (a link, a spelling)."""
    seen = {storage.real_path(f): f for f in train.files}
    for f in evals.files:
        if storage.real_path(f) in seen:
            raise cli.UserError(
                f"{f} is both a training and an eval shard (config.data.train_files and eval_files "
                "name it): the eval would score the model on data it trained on; point eval_files "
                "at held-out records (a data_prep --output_dir names its eval split)"
            )
