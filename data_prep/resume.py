"""The scaled job's work directory, <output_dir>/_work (removed when the job has finished): what
makes it resumable, and what a rerun trusts. Its files, and what a rerun redoes: docs/data_prep.md,
"Resume".
"""

import contextlib
import re

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, shard_files
from bert_jax.storage import workdir_lock
from data_prep import content, job, output, units

_SHARD_MARKER = re.compile(r"^(train|eval)-(\d{5})\.json$")


def unit_path(work_dir: str, index: int, suffix: str) -> str:
    return storage.join(work_dir, "units", f"{index:05d}.{suffix}")


def shard_marker(work_dir: str, split: str, shard: int) -> str:
    return storage.join(work_dir, "shards", f"{split}-{shard:05d}.json")


def stat(unit) -> dict | None:
    """The unit's file as it is before the unit reads it (None for TFDS and other non-files)."""
    if not units.KINDS[unit.kind].is_file:
        return None
    try:
        return content.file_stat(unit.path)
    except OSError:
        return None


class WorkDir:
    def __init__(self, output_dir: str):
        self.output_dir = output_dir
        self.path = storage.join(output_dir, manifest.WORK_DIR)
        self.units = storage.join(self.path, "units")
        self.shards = storage.join(self.path, "shards")

    @contextlib.contextmanager
    def locked(self):
        """One job per output directory: the trainers' lock, taken over from a killed job."""
        with workdir_lock.hold(self.output_dir, "data_prep.main", flag="--output_dir"):
            for sub in (self.units, self.shards):
                storage.makedirs(sub)
            yield

    def finished(self, spec: job.JobSpec, planned: list, fp: dict) -> tuple[dict | None, dict]:
        """The finished job's manifest (None: unfinished) and its shards to rebuild ({file:
        problem}); an error when it had other settings or input that has changed since."""
        finished = output.read_manifest(self.output_dir)
        if finished is None:
            return None, {}
        if finished.get("fingerprint") != fp:
            raise job.JobMismatch(
                f"--output_dir={self.output_dir!r} holds a finished job with other settings "
                f"({job.differences(finished.get('fingerprint'), fp)}); use another --output_dir"
            )
        changed = content.changed_inputs(
            planned, finished.get("inputs", {}), spec.text_field, spec.tfds_data_dir
        )
        if changed:
            raise job.JobMismatch(
                f"--output_dir={self.output_dir!r} holds a finished job whose input has changed "
                f"since ({', '.join(changed)}); use another --output_dir, or empty this one to "
                "rebuild"
            )
        damaged = output.damaged_shards(self.output_dir, finished)
        if not damaged and storage.exists(self.path):  # a kill after the manifest, before rmtree
            with self.locked():
                storage.rmtree(self.path)
        return finished, damaged

    @contextlib.contextmanager
    def running(self, fp: dict, finished: dict | None, damaged: dict):
        """Holds the lock while the job runs on from its state here (`damaged`: shards of the
        `finished` output to rebuild); removes the work directory when it has finished, or has
        no instance before any shard is written."""
        with self.locked():
            if finished is not None:
                self.reopen(finished, damaged)
            self.check(fp)
            try:
                yield
            except job.NoInstances:
                if not any(manifest.SHARD_NAME.match(n) for n in storage.sizes(self.output_dir)):
                    storage.rmtree(self.path)
                raise
        storage.rmtree(self.path)

    def check(self, fp: dict) -> None:
        """Stops a rerun whose settings differ from the unfinished job's; then records them."""
        path = storage.join(self.path, "job.json")
        old = output.read_json(path)
        if old is not None:
            # Shard settings may change until the first shard is written: units do not use them.
            binding = ("units", "shards") if storage.sizes(self.shards) else ("units",)
            if any(old[part] != fp[part] for part in binding):
                raise job.JobMismatch(
                    f"--output_dir={self.output_dir!r} holds an unfinished job with other "
                    f"settings ({job.differences(old, fp, binding)}); rerun with the same flags "
                    f"to finish it, or use another --output_dir (or delete {self.path} to start "
                    "over)"
                )
        elif any(manifest.SHARD_NAME.match(name) for name in storage.sizes(self.output_dir)):
            raise job.JobMismatch(
                f"--output_dir={self.output_dir!r} holds record shards but no manifest or "
                "job state; use an empty --output_dir"
            )
        output.write_json_atomic(path, fp)
        if storage.is_url(self.path):
            return  # an unfinished upload leaves no object behind: nothing to clean up
        for folder in (self.output_dir, self.units, self.shards):
            output.remove_temporaries(folder)  # never under a final name

    def reopen(self, finished: dict, damaged: dict) -> None:
        """Turns a finished output with damaged shards back into an unfinished job: the intact
        shards' markers first, then the manifest goes."""
        cli.warn(
            f"{self.output_dir}: {'; '.join(sorted(damaged.values()))}; rebuilding them (the "
            "units are computed again)"
        )
        output.write_json_atomic(storage.join(self.path, "job.json"), finished["fingerprint"])
        for split, entries in finished["shards"].items():
            for shard, entry in enumerate(entries):
                if entry["file"] not in damaged:
                    output.write_json_atomic(shard_marker(self.path, split, shard), entry)
        storage.remove(storage.join(self.output_dir, manifest.FILE))

    def remove_other_shards(self, shards: dict) -> None:
        """Removes shard files the final plan (`shards`) does not name: an earlier plan's, from a
        kill between a shard and its marker before the input changed."""
        keep = {entry["file"] for entries in shards.values() for entry in entries}
        for name in storage.sizes(self.output_dir):
            if manifest.SHARD_NAME.match(name) and name not in keep:
                storage.remove(storage.join(self.output_dir, name))

    def drop_untrusted(self, spec: job.JobSpec, planned: list) -> tuple[dict, dict]:
        """Forgets finished work a rerun cannot trust; returns the units' markers kept by index
        and the shards' manifest entries by (split, shard)."""
        listed = storage.sizes(self.units)  # one listing: which markers exist, the records' sizes
        stats, changed, kept = {}, [], {}
        for unit in planned:
            marker_path = unit_path(self.path, unit.index, "json")
            marker = (
                output.read_json(marker_path) if storage.basename(marker_path) in listed else None
            )
            if marker is None:
                continue
            records = unit_path(self.path, unit.index, "bin")
            intact = listed.get(storage.basename(records)) == marker.get("bin_bytes")
            if unit.path not in stats:  # one stat per file
                stats[unit.path] = stat(unit)
            recorded = marker.get("content")
            if recorded is None or content.unit_changed(
                unit, recorded, stats[unit.path], spec.text_field, spec.tfds_data_dir
            ):
                changed.append(unit)
            elif intact:
                kept[unit.index] = marker
                continue
            storage.remove(marker_path)  # unfinished from here on
            storage.remove(records)
        if changed:
            cli.warn(
                f"the input changed since this unfinished job began "
                f"({', '.join(sorted({u.path for u in changed}))}): {len(changed)} unit(s) are "
                "redone and every shard is written again"
            )
        shards, kept_shards = storage.sizes(self.output_dir), {}
        for name in storage.sizes(self.shards):
            marker_path = storage.join(self.shards, name)
            entry = output.read_json(marker_path)
            if entry is None:
                continue
            if changed or shard_files.shard_problem(self.output_dir, entry, sizes=shards):
                storage.remove(marker_path)
                if changed:
                    storage.remove(storage.join(self.output_dir, entry["file"]))
            elif match := _SHARD_MARKER.match(name):
                kept_shards[match[1], int(match[2])] = entry
        return kept, kept_shards
