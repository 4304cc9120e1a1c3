"""manifest.json: the data contract between data_prep and every stage that reads records.

data_prep writes it beside the shards when a job has finished (never before: a directory without
one is unfinished). The trainer, eval, export, embed and fine-tuning read it instead of asking the
user to retype the data's facts into a config. Fields (version 2; every writer sets all of them):

    manifest_version   2
    mode, format       how the job ran ("scaled" | "reference"), "arrayrecord" | "tfrecord"
    schema             {"max_seq_length": L, "max_predictions_per_seq": P}; P is 0 for unmasked
                       records (written for dynamic masking)
    masked, nsp        bool, bool
    whole_word_mask    bool: how the masks in the records were drawn (unmasked records: how the
                       job was asked to mask, a default for the trainer's dynamic masking)
    vocab              {"file": the path as given, "md5", "size": ids 0..size-1,
                        "kind": "wordpiece" | "sentencepiece", "do_lower_case": bool,
                        "special_ids": {"pad", "unk", "cls", "sep", "mask"}}
    vocab_md5          = vocab.md5 (what version-1 manifests had)
    shards             {"train": [{"file": name beside the manifest, "instances", "md5",
                                   "bytes": its size, checked when a job is rerun}],
                        "eval": [...]}
    stats, read, documents, seconds, flags, ...: the job's report; scaled and Beam jobs add
                       fingerprint (the settings a rerun must match) and inputs (per input file
                       its size, mtime_ns and a content hash, rechecked when a job is rerun)

Version 1 (data_prep before the contract; no `manifest_version`) lacks `vocab` (only
`vocab_md5`; the vocabulary file, do_lower_case and the masking flags are in `flags`),
`whole_word_mask`, and, in reference mode, `schema` and `nsp`. `read` fills them in from `flags`
(and leaves the vocabulary's size and special ids to the reader, bert_jax.data_contract, which
loads the vocabulary file the flags name).

The readers' side: `read` (one manifest, any version, as version 2), `find_shards` (the shard
files that config.data.train_files / eval_files name: the manifest's list, never a directory
listing) and `verify_md5`; bert_jax.data_contract turns them into the facts a run uses.

No JAX import: data_prep (the writer) imports this module too.
"""

import dataclasses
import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Sequence

from bert_jax import cli, storage

FILE = "manifest.json"
VERSION = 2
SPLITS = ("train", "eval")
# data_prep's shard names, its unfinished-job state and its writers' temporary files.
SHARD_NAME = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.[a-z_]+$")
WORK_DIR = "_work"
TEMPORARY = re.compile(r"\.tmp-\d+$")


class ManifestError(cli.UserError):
    """A manifest that cannot be read or does not describe its directory; says what to do."""


def file_md5(path: str, open_binary=None) -> str:
    """The md5 of a file (local or in a bucket), read in 1 MiB blocks; `open_binary` opens remote
    paths (Beam's FileSystems). A GCS object's md5 is the one the server keeps (no download)."""
    if open_binary is None:
        return storage.md5(path)
    digest = hashlib.md5()
    with open_binary(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def vocab_entry(tokenizer, file: str | None = None, md5: str | None = None) -> dict:
    """The manifest's "vocab" block for a bert_jax.tokenization tokenizer; `file` and `md5` when
    the tokenizer was loaded from a local copy of a remote vocabulary (the Beam job)."""
    from bert_jax import tokenization  # no import cycle at module load

    kind = (
        "sentencepiece"
        if isinstance(tokenizer, tokenization.SentencePieceTokenizer)
        else "wordpiece"
    )
    return {
        "file": file or tokenizer.vocab_file,
        "md5": md5 or file_md5(tokenizer.vocab_file),
        "size": int(tokenizer.vocab_size),
        "kind": kind,
        "do_lower_case": bool(tokenizer.do_lower_case),
        "special_ids": {
            "pad": int(tokenizer.pad_id),
            "unk": int(tokenizer.unk_id),
            "cls": int(tokenizer.cls_id),
            "sep": int(tokenizer.sep_id),
            "mask": int(tokenizer.mask_id),
        },
    }


def read(path: str) -> dict:
    """The manifest at `path` (a manifest.json or the directory holding one), checked and brought
    to version 2's fields; `dir` is added (the shards' directory). A version-1 manifest's `vocab`
    has no `size` or `special_ids` (None)."""
    if storage.isdir(path):
        path = storage.join(path, FILE)
    try:
        raw = json.loads(storage.read_text(path))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise ManifestError(
            f"{path} cannot be read ({e}); rerun the data_prep job that wrote it to rewrite it"
        ) from e
    version = raw.get("manifest_version", 1)
    if not isinstance(version, int) or version > VERSION:
        raise ManifestError(
            f"{path} has manifest_version {version!r}; this bert_jax reads versions 1 to "
            f"{VERSION}: update bert_jax"
        )
    flags = raw.get("flags") or {}
    try:
        masked = bool(raw["masked"])
        schema = raw.get("schema") or {
            "max_seq_length": flags["max_seq_length"],
            "max_predictions_per_seq": flags["max_predictions_per_seq"] if masked else 0,
        }
        vocab = raw.get("vocab") or {
            "file": flags.get("vocab_file"),
            "md5": raw["vocab_md5"],
            "size": None,
            "kind": None,
            "do_lower_case": flags.get("do_lower_case"),
            "special_ids": None,
        }
        shards = check_shards(raw.get("shards"), path)
        out = {
            "path": path,
            "dir": storage.dirname(path),
            "manifest_version": version,
            "mode": raw.get("mode"),
            "format": raw.get("format"),
            "masked": masked,
            "nsp": bool(raw.get("nsp", flags.get("nsp", True))),
            "whole_word_mask": bool(
                raw.get("whole_word_mask", flags.get("do_whole_word_mask", False))
            ),
            "schema": {
                "max_seq_length": int(schema["max_seq_length"]),
                "max_predictions_per_seq": int(schema["max_predictions_per_seq"]),
            },
            "vocab": vocab,
            "masked_lm_prob": flags.get("masked_lm_prob"),
            # The masking budget data_prep was given: dynamic masking's default.
            "flag_max_predictions_per_seq": flags.get("max_predictions_per_seq"),
            "shards": shards,
        }
    except ManifestError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(
            f"{path} lacks {e} or holds a malformed value: not a data_prep manifest, or a damaged "
            "one; rerun the data_prep job that wrote it"
        ) from e
    return out


def check_shards(shards, path: str) -> dict[str, list[dict]]:
    """A manifest's `shards` field, checked: {split: [entry]}, each entry a plain file name
    beside the manifest (never absolute, never `..` or a subdirectory: a manifest must not send a
    reader outside its directory), a record count and an md5; no file under two splits (a run
    would train on its own held-out data). Raises ManifestError naming `path` and the field.
    data_prep's --verify and reruns and the trainer's find_shards all read shards through it."""

    def bad(field: str, problem: str) -> ManifestError:
        return ManifestError(
            f"{path}: {field} {problem}; rerun the data_prep job that wrote it to rewrite it"
        )

    if not isinstance(shards, dict):
        raise bad("shards", f"is {type(shards).__name__}, not an object of splits")
    out, seen = {}, {}
    for split in SPLITS:
        entries = shards.get(split, [])
        if not isinstance(entries, list):
            raise bad(f"shards.{split}", f"is {type(entries).__name__}, not a list")
        for i, entry in enumerate(entries):
            field = f"shards.{split}[{i}]"
            if not isinstance(entry, dict):
                raise bad(field, f"is {type(entry).__name__}, not an object")
            for key in ("file", "instances", "md5"):
                if key not in entry:
                    raise bad(field, f"lacks {key!r}")
            name = entry["file"]
            if not isinstance(name, str) or not plain_name(name):
                raise bad(
                    f"{field}.file",
                    f"is {name!r}: a shard must be a file name beside the manifest (no "
                    "directory, no `..`, not absolute)",
                )
            count = entry["instances"]
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise bad(f"{field}.instances", f"is {count!r}, not a record count")
            if not isinstance(entry["md5"], str):
                raise bad(f"{field}.md5", f"is {entry['md5']!r}, not an md5")
            if seen.setdefault(name, split) != split:
                raise bad(
                    f"{field}.file",
                    f"{name!r} is listed under both {seen[name]} and {split}: a run would "
                    "train on its own held-out data",
                )
        out[split] = list(entries)
    return out


def plain_name(name: str) -> bool:
    """Whether `name` is a file name that stays in the directory it is joined to."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and os.sep not in name
        and "\\" not in name
        and "\0" not in name
    )


# --- Where the shards are ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shards:
    """Record files of one split, with what their manifest says about each (None without)."""

    files: list[str]
    instances: list[int] | None
    md5: list[str] | None
    manifests: list[dict]
    nbytes: list[int | None] | None = None  # each file's size as listed (older manifests: None)


def _split_patterns(patterns: str | Sequence[str]) -> list[str]:
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    return [storage.expand(p.strip()) for p in patterns if p and p.strip()]


def _unfinished(directory: str, names: list[str]) -> bool:
    """Whether `directory` looks like a data_prep output whose job has not finished."""
    return WORK_DIR in names or any(SHARD_NAME.match(n) or TEMPORARY.search(n) for n in names)


def _unfinished_error(directory: str) -> cli.UserError:
    return cli.UserError(
        f"{directory} holds data_prep shards but no {FILE}: its data_prep job has not "
        f"finished (killed, or still running), so its shards are not all there. Rerun the same "
        f"`python -m data_prep.main ... --output_dir={directory}` command to finish it (or copy "
        f"the job's {FILE} beside copied shards)"
    )


def find_shards(patterns: str | Sequence[str], split: str = "train") -> Shards:
    """The record files that `patterns` (comma-separated directories or globs) name; see the
    module docstring. `split` is the manifest split a bare directory stands for."""
    items = _split_patterns(patterns)
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
        path = storage.join(directory, FILE)
        if storage.isfile(path):
            m = manifests.setdefault(path, read(path))
            for entry in _listed(item, m, split, is_dir):
                listed.append(storage.join(m["dir"], entry["file"]))
                files.append(listed[-1])
                instances.append(int(entry["instances"]))
                md5s.append(entry["md5"])
                nbytes.append(entry.get("bytes"))
            continue
        described = False
        if is_dir:
            if _unfinished(item, storage.listdir(item)):
                raise _unfinished_error(item)
            raise cli.UserError(
                f"{item} has no {FILE}: point config.data.train_files at a data_prep "
                "--output_dir, or name record files with a glob (e.g. '/data/part-*.tfrecord')"
            )
        matches = storage.glob(item)
        if storage.isdir(directory) and _unfinished(
            directory, [storage.basename(p) for p in matches] + storage.listdir(directory)
        ):
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
            f"{missing[0]} is listed in {storage.join(storage.dirname(missing[0]), FILE)} but "
            "missing: the data_prep output is incomplete; rerun its data_prep command to rewrite "
            "the shard, or restore the file"
        )
    if len(set(files)) < len(files):
        raise cli.UserError(f"{patterns!r} names some record files twice")
    return Shards(
        files,
        instances if described else None,
        md5s if described else None,
        list(manifests.values()),
        nbytes if described else None,
    )


def _missing(files: list[str]) -> list[str]:
    """The files that are not there; in a bucket by one listing per directory, not one request
    per shard."""
    listed: dict[str, set[str]] = {}
    for f in files:
        directory = storage.dirname(f)
        if directory not in listed:
            listed[directory] = (
                set(storage.listdir(directory)) if storage.isdir(directory) else set()
            )
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


def verify_md5(shards: Shards) -> None:
    """Re-checks every shard against its manifest md5 (config.data.verify_md5)."""
    for path, md5 in zip(shards.files, shards.md5 or []):
        if file_md5(path) != md5:
            raise cli.UserError(
                f"{path} differs from the md5 its manifest records (damaged or changed since "
                "data_prep wrote it); rerun data_prep to rewrite it"
            )


def check_disjoint(train: Shards, evals: Shards) -> None:
    """Train and eval shards may not share a file (also by another name: a link, another
    spelling of the path): a run would report held-out figures on what it trained on."""

    def same(f: str) -> str:
        return f if storage.is_url(f) else os.path.realpath(f)

    seen = {same(f): f for f in train.files}
    for f in evals.files:
        if same(f) in seen:
            raise cli.UserError(
                f"{f} is both a training and an eval shard (config.data.train_files and "
                "eval_files name it): the eval would score the model on data it trained on; "
                "point eval_files at held-out records (a data_prep --output_dir names its eval "
                "split)"
            )


def contract_fields(
    *,
    mode: str,
    fmt: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked: bool,
    nsp: bool,
    whole_word_mask: bool,
    vocab: dict,
    shards: dict,
) -> dict:
    """The fields every writer sets (version 2, as the module docstring lists them); a job adds
    its report (stats, read, documents, seconds, flags, ...) to this dict."""
    return {
        "manifest_version": VERSION,
        "mode": mode,
        "format": fmt,
        "schema": {
            "max_seq_length": max_seq_length,
            "max_predictions_per_seq": max_predictions_per_seq if masked else 0,
        },
        "masked": masked,
        "nsp": nsp,
        "whole_word_mask": whole_word_mask,
        "vocab": vocab,
        "vocab_md5": vocab["md5"],
        "shards": shards,
    }
