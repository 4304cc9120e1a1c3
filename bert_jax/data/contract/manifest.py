"""manifest.json, the data contract data_prep writes when a job has finished: the fields every
writer sets (`contract_fields`), the one reader (`load`; `read` gives any version as version 2)
and data_prep's file names, by which the trainer tells an unfinished job. No JAX import.
Fields and versions: docs/training.md, "manifest.json"; an example: docs/data_prep.md, "Manifest".
"""

import dataclasses
import json
import re

from bert_jax import cli, storage
from bert_jax.data.contract import features
from bert_jax.text import tokenization

FILE = "manifest.json"
VERSION = 2
SPLITS = ("train", "eval")
SPECIAL_ROLES = ("pad", "unk", "cls", "sep", "mask")  # vocab.special_ids, in this order
# data_prep's shard names, its unfinished-job state and its writers' temporary files.
SHARD_NAME = re.compile(r"^(train|eval)-\d{5}-of-\d{5}\.[a-z_]+$")
WORK_DIR = "_work"
TEMPORARY = re.compile(r"\.tmp-\d+$")
# The original generator's defaults: data_prep's, and dynamic masking's when nothing else says.
MASKED_LM_PROB = 0.15
MAX_PREDICTIONS_PER_SEQ = 20


class ManifestError(cli.UserError):
    """A manifest that cannot be read or does not describe its directory; says what to do.
    `problem`: what is wrong, without the advice (the whole message unless told)."""

    def __init__(self, message: str, problem: str | None = None):
        super().__init__(message)
        self.problem = message if problem is None else problem


def vocab_entry(tokenizer, file: str | None = None) -> dict:
    """The manifest's "vocab" block of a tokenizer; `file`: the path the user gave, if another."""
    entry = {
        "file": file or tokenizer.vocab_file,
        "md5": storage.md5(tokenizer.vocab_file),
        "size": int(tokenizer.vocab_size),
        "kind": tokenizer.kind,
        "do_lower_case": bool(tokenizer.do_lower_case),
        "special_ids": {k: int(getattr(tokenizer, f"{k}_id")) for k in SPECIAL_ROLES},
    }
    if tokenizer.kind == tokenization.tokenizer_json.KIND:  # which tokens the file's ids are
        entry["special_tokens"] = dict(tokenizer.special_tokens)
        entry["model"] = tokenizer.model_type
    return entry


def load(path: str, missing_ok: bool = False) -> dict | None:
    """manifest.json's fields as written, its shards checked; None for no file with `missing_ok`.
    ManifestError's `problem` has no advice (callers add theirs); other OSErrors are left."""
    try:
        raw = json.loads(storage.read_text(path))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    except ValueError as e:
        raise ManifestError(f"{path} is not JSON ({e})", problem=str(e)) from e
    if not isinstance(raw, dict):
        raise ManifestError(f"{path} is not a JSON object", problem="not a JSON object")
    check_shards(raw.get("shards"), path)
    return raw


def read(path: str, raw: dict | None = None) -> dict:
    """The manifest at `path` (or in that directory) as version 2, plus `dir`; `raw`: its fields."""
    if storage.isdir(path):
        path = storage.join(path, FILE)
    try:
        raw = raw or load(path)
    except (ManifestError, OSError) as e:
        problem = getattr(e, "problem", e)  # an OSError (a server that does not answer): itself
        if problem == str(e):  # its shards: the message already says what to do
            raise
        raise ManifestError(
            f"{path} cannot be read ({problem}); rerun the data_prep job that wrote it to "
            "rewrite it"
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
        return {
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
            "shards": {split: list(raw["shards"].get(split, [])) for split in SPLITS},
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(
            f"{path} lacks {e} or holds a malformed value: not a data_prep manifest, or a damaged "
            "one; rerun the data_prep job that wrote it"
        ) from e


def check_shards(shards, path: str) -> None:
    """Checks a manifest's `shards`: plain names beside it, counts, md5s, no file in two splits."""

    def bad(field: str, problem: str) -> ManifestError:
        return ManifestError(
            f"{path}: {field} {problem}; rerun the data_prep job that wrote it to rewrite it"
        )

    if not isinstance(shards, dict):
        raise bad("shards", f"is {type(shards).__name__}, not an object of splits")
    seen = {}
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
            name = entry["file"]  # a plain name stays beside it ("/", "\\" cover os.sep)
            if not isinstance(name, str) or name in ("", ".", "..") or set(name) & set("/\\\0"):
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


def contract_fields(
    mode: str,
    fmt: str,
    schema: features.Schema,
    *,
    nsp: bool,
    whole_word_mask: bool,
    vocab: dict,
    shards: dict,
) -> dict:
    """The fields every writer sets; a job adds its report (stats, flags, ...) to this dict."""
    return {
        "manifest_version": VERSION,
        "mode": mode,
        "format": fmt,
        "schema": dataclasses.asdict(schema),
        "masked": schema.masked,
        "nsp": nsp,
        "whole_word_mask": whole_word_mask,
        "vocab": vocab,
        "vocab_md5": vocab["md5"],
        "shards": shards,
    }
