"""The scaled job's work directory: what makes it resumable, and what a rerun trusts.

<output_dir>/.lock while a job runs (bert_jax.workdir_lock: a second job is refused, naming the
first; a lock left by a killed job is taken over), and <output_dir>/_work, removed when the job
has finished:
  job.json          the settings' fingerprint: a rerun with other settings stops with an error
  units/NNNNN.bin   a unit's records (train, eval) and their offsets, renamed into place when
                    complete,
  units/NNNNN.json  then this marker: a unit is finished if and only if its marker exists; it holds
                    the unit's content hash and its file's size and mtime before reading
                    (content.py), and the .bin file's size
  shards/SPLIT-NNNNN.json  a shard's count, md5 and size, written after the shard is renamed into
                    place

A rerun trusts nothing it can check cheaply, and checks the rest only when something changed:
  * unfinished job: a unit is redone when its records file is missing or of another size, or when
    its input's content changed (a stat per file; a rehash only of units whose file shows another
    size or mtime, content.py). If any input changed, every shard written so far is dropped and
    written again: the output is then that of a fresh run on the input as it is now. A shard whose
    file is missing or of another size than recorded is written again.
  * finished job (a manifest with the same settings): an input whose content changed since is an
    error naming it (the records describe the old input); a shard that is missing or of another
    size than the manifest says is rebuilt (the units are computed again, intact shards are kept).
    Otherwise there is nothing to do. `--verify` also recomputes every shard's md5.
Input files whose size changed give another plan of units: that is a settings mismatch (an error
naming the change) for an unfinished job, and a changed input for a finished one.
"""

import contextlib
import json
import logging
import os
import re

from bert_jax import manifest as contract
from bert_jax import workdir_lock
from data_prep import content, job, output

WORK_DIR = "_work"
SHARD_NAME = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.[a-z_]+$")
_TMP_NAME = re.compile(r"\.tmp-\d+$")


def unit_path(work_dir: str, index: int, suffix: str) -> str:
    return os.path.join(work_dir, "units", f"{index:05d}.{suffix}")


def shard_marker(work_dir: str, split: str, shard: int) -> str:
    return os.path.join(work_dir, "shards", f"{split}-{shard:05d}.json")


def stat(unit) -> dict | None:
    """The unit's file as it is before the unit reads it (None for TFDS and other non-files)."""
    if unit.kind == "tfds":
        return None
    try:
        return content.local_stat(unit.path)
    except OSError:
        return None


class WorkDir:
    def __init__(self, output_dir: str):
        self.output_dir = output_dir
        self.path = os.path.join(output_dir, WORK_DIR)

    @contextlib.contextmanager
    def locked(self):
        """One job per output directory: the trainers' lock (bert_jax.workdir_lock), which
        names the job holding it and is taken over from a killed one."""
        with workdir_lock.hold(self.output_dir, "data_prep.main", flag="--output_dir"):
            for sub in ("units", "shards"):
                os.makedirs(os.path.join(self.path, sub), exist_ok=True)
            yield

    def check(self, fp: dict) -> None:
        """Stops a rerun whose settings differ from the unfinished job's; then records this job's
        settings."""
        path = os.path.join(self.path, "job.json")
        if os.path.isfile(path):
            with open(path) as f:
                old = json.load(f)
            # Shard settings may change until the first shard is written: units do not depend on
            # them.
            binding = (
                ("units", "shards") if os.listdir(os.path.join(self.path, "shards")) else ("units",)
            )
            if any(old[part] != fp[part] for part in binding):
                raise job.JobMismatch(
                    f"--output_dir={self.output_dir!r} holds an unfinished job with other "
                    f"settings ({job.differences(old, fp, binding)}); rerun with the same flags "
                    f"to finish it, or use another --output_dir (or delete {self.path} to start "
                    "over)"
                )
        elif any(SHARD_NAME.match(name) for name in os.listdir(self.output_dir)):
            raise job.JobMismatch(
                f"--output_dir={self.output_dir!r} holds record shards but no manifest or "
                "job state; use an empty --output_dir"
            )
        output.write_json_atomic(path, fp)
        for folder in (
            self.output_dir,
            os.path.join(self.path, "units"),
            os.path.join(self.path, "shards"),
        ):
            for name in os.listdir(folder):  # leftovers of killed writers: never under a final name
                if _TMP_NAME.search(name):
                    os.remove(os.path.join(folder, name))

    def marker(self, index: int) -> dict | None:
        path = unit_path(self.path, index, "json")
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return json.load(f)

    def reopen(self, finished: dict, damaged: dict) -> None:
        """Turns a finished output with damaged shards back into an unfinished job: the intact
        shards' markers first, then the manifest goes; the units are computed again."""
        logging.warning(
            "%s: %s; rebuilding them (the units are computed again)",
            self.output_dir,
            "; ".join(sorted(damaged.values())),
        )
        output.write_json_atomic(os.path.join(self.path, "job.json"), finished["fingerprint"])
        for split, entries in finished["shards"].items():
            for shard, entry in enumerate(entries):
                if entry["file"] not in damaged:
                    output.write_json_atomic(shard_marker(self.path, split, shard), entry)
        os.remove(os.path.join(self.output_dir, contract.FILE))

    def remove_other_shards(self, keep: set) -> None:
        """Removes shard files of this job that its final plan does not name (an earlier plan's,
        when the input changed between runs and a kill came between a shard and its marker)."""
        for name in os.listdir(self.output_dir):
            if SHARD_NAME.match(name) and name not in keep:
                os.remove(os.path.join(self.output_dir, name))

    def drop_untrusted(self, spec: job.JobSpec, planned: list) -> None:
        """Forgets finished work that a rerun cannot trust (the module docstring's list)."""
        stats, changed = {}, []
        for unit in planned:
            marker = self.marker(unit.index)
            if marker is None:
                continue
            records = unit_path(self.path, unit.index, "bin")
            intact = os.path.isfile(records) and os.path.getsize(records) == marker.get("bin_bytes")
            if unit.path not in stats:  # one stat per file
                stats[unit.path] = stat(unit)
            recorded = marker.get("content")
            if recorded is None or content.unit_changed(
                unit, recorded, stats[unit.path], spec.text_field, spec.tfds_data_dir
            ):
                changed.append(unit)
            elif intact:
                continue
            os.remove(unit_path(self.path, unit.index, "json"))  # unfinished from here on
            if os.path.exists(records):
                os.remove(records)
        if changed:
            logging.warning(
                "the input changed since this unfinished job began (%s): %d unit(s) are redone "
                "and every shard is written again",
                ", ".join(sorted({u.path for u in changed})),
                len(changed),
            )
        shards_dir = os.path.join(self.path, "shards")
        for name in os.listdir(shards_dir):
            marker_path = os.path.join(shards_dir, name)
            with open(marker_path) as f:
                entry = json.load(f)
            if changed or output.shard_problem(self.output_dir, entry):
                os.remove(marker_path)
                shard = os.path.join(self.output_dir, entry["file"])
                if changed and os.path.exists(shard):
                    os.remove(shard)  # its name may not be in the new plan
