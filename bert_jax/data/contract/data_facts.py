"""The data contract, reading side: `resolve` fills in every data fact the config leaves unset
(0, "" or None) from the manifests; a disagreeing config value is an error naming both. No JAX.
docs/training.md, "The data contract": each fact, where it comes from, and its errors.
"""

from __future__ import annotations

import dataclasses

from bert_jax import cli, storage
from bert_jax.data.contract import features, manifest, shard_files
from bert_jax.text import tokenization

SPECIAL = ("cls", "sep", "mask")  # the ids the trainer needs: dynamic masking never masks [CLS]...


@dataclasses.dataclass(frozen=True)
class DataFacts:
    """What the records are, from a resolved config's data section."""

    max_seq_length: int
    max_predictions_per_seq: int  # masked positions per row of a batch (after dynamic masking)
    dynamic_masking: bool  # records are unmasked; the input pipeline masks them
    nsp: bool  # records pair sentences for next-sentence prediction
    masked_lm_prob: float  # dynamic masking's share of tokens to predict
    vocab_size: int  # every id in the records is below it (0: unknown: the model's then)
    special_ids: dict  # {"cls", "sep", "mask"} -> id (None where unknown)
    pack_max_examples: int = 0  # records per packed row (config.data.pack); 0: one per row

    @classmethod
    def from_data(cls, d) -> DataFacts:
        """The facts of a config.data that `resolve` filled in, or that sets them all itself."""
        missing = [
            f"config.data.{name}"
            for name in ("max_seq_length", "max_predictions_per_seq", "dynamic_masking")
            if _unset(d[name])
        ]
        if missing:
            raise cli.UserError(
                f"{', '.join(missing)} unset: pass the config through "
                "bert_jax.data.contract.data_facts.resolve (it reads them from the data's "
                "manifest.json), or set them"
            )
        return cls(
            int(d.max_seq_length),
            int(d.max_predictions_per_seq),
            bool(d.dynamic_masking),
            True if d.nsp is None else bool(d.nsp),
            manifest.MASKED_LM_PROB if d.masked_lm_prob is None else float(d.masked_lm_prob),
            int(d.get("vocab_size") or 0),
            {name: d.get(f"{name}_token_id") for name in SPECIAL},
            int(d.get("pack_max_examples") or 0) if d.get("pack") else 0,
        )

    def record_schema(self) -> features.Schema:
        """The records as written: unmasked ones have no masked_lm_* features."""
        return features.Schema(
            self.max_seq_length, 0 if self.dynamic_masking else self.max_predictions_per_seq
        )

    def batch_schema(self) -> features.Schema:
        """A batch row as the model sees it, masked either way."""
        return features.Schema(self.max_seq_length, self.max_predictions_per_seq)


def _unset(value) -> bool:
    return value is None or value == "" or (value == 0 and not isinstance(value, bool))


def _described(manifests: list[dict]) -> tuple[dict, dict]:
    """({fact: value}, {fact: manifest path}) over the manifests, which must agree."""
    values, where = {}, {}
    for m in manifests:
        vocab = m["vocab"]
        special = vocab.get("special_ids") or {}
        facts = {
            "max_seq_length": m["schema"]["max_seq_length"],
            "dynamic_masking": not m["masked"],
            "nsp": m["nsp"],
            "whole_word_mask": m["whole_word_mask"],
            "vocab_md5": vocab.get("md5"),
            "vocab_size": vocab.get("size"),
            "do_lower_case": vocab.get("do_lower_case"),
            **{f"{name}_token_id": special.get(name) for name in SPECIAL},
        }
        if m["masked"]:
            facts["max_predictions_per_seq"] = m["schema"]["max_predictions_per_seq"]
        for key, value in facts.items():
            if value is None:
                continue
            if key in values and values[key] != value:
                raise cli.UserError(
                    f"the data's manifests disagree: {where[key]} says {key}={values[key]!r}, "
                    f"{m['path']} says {value!r}; train and evaluate on records written alike"
                )
            values.setdefault(key, value)
            where.setdefault(key, m["path"])
        for key, value in (
            ("vocab_file", vocab.get("file")),
            ("masked_lm_prob", m.get("masked_lm_prob")),
            ("budget", m.get("flag_max_predictions_per_seq")),
        ):  # defaults, not facts: the first manifest's
            if value is not None and key not in values:
                values[key], where[key] = value, m["path"]
    return values, where


def _vocabulary(d, described: dict, where: dict) -> str:
    """The vocabulary file (config's, else the manifest's, else ""), checked against the data's
    md5; a version-1 manifest's size and special ids go into `described` from the file."""
    vocab_file = d.vocab_file or described.get("vocab_file") or ""
    lower = _first(d.do_lower_case, described.get("do_lower_case"))
    why = storage.not_a_file(d.vocab_file) if d.vocab_file else None
    if why:
        raise cli.UserError(f"config.data.vocab_file={d.vocab_file!r} {why}")
    if vocab_file and storage.isfile(vocab_file) and "vocab_size" not in described:
        tok = tokenization.make_tokenizer(vocab_file, tokenization.lower_case(lower))
        entry = manifest.vocab_entry(tok)
        if described.get("vocab_md5", entry["md5"]) == entry["md5"]:
            from_file = {"vocab_size": entry["size"], "vocab_md5": entry["md5"]}
            from_file.update({f"{n}_token_id": entry["special_ids"][n] for n in SPECIAL})
            for key, value in from_file.items():
                described.setdefault(key, value)
                where.setdefault(key, vocab_file)
    if d.vocab_file and described.get("vocab_md5"):
        md5 = storage.md5(d.vocab_file)
        if md5 != described["vocab_md5"]:
            raise cli.UserError(
                f"config.data.vocab_file={d.vocab_file!r} (md5 {md5}) is not the vocabulary the "
                f"records were tokenized with ({where['vocab_md5']}: md5 "
                f"{described['vocab_md5']}); leave config.data.vocab_file unset"
            )
    return vocab_file


def resolve(config):
    """A copy of `config` with every data fact (and a 0 config.model.vocab_size) filled in."""
    d = config.data
    train = shard_files.find_shards(d.train_files, "train")
    evals = shard_files.find_shards(d.eval_files, "eval") if d.eval_files else None
    if evals is not None:
        shard_files.check_disjoint(train, evals)
    manifests = {m["path"]: m for m in train.manifests + (evals.manifests if evals else [])}
    if d.verify_md5:
        for shards in (train, evals):
            if shards is not None:
                shard_files.verify(shards)
    described, where = _described(list(manifests.values()))
    vocab_file = _vocabulary(d, described, where)

    keys = ("max_seq_length", "dynamic_masking", "nsp", "vocab_md5", "vocab_size", "do_lower_case")
    keys += tuple(f"{name}_token_id" for name in SPECIAL)
    values = {key: _take(key, d[key], described, where) for key in keys}
    masked_records = values["dynamic_masking"] is False
    values["max_predictions_per_seq"] = (
        _take("max_predictions_per_seq", d.max_predictions_per_seq, described, where)
        if masked_records
        else _first(d.max_predictions_per_seq, described.get("budget"))
    )
    values["masked_lm_prob"] = _first(
        d.masked_lm_prob, described.get("masked_lm_prob"), manifest.MASKED_LM_PROB
    )
    values["vocab_file"] = vocab_file
    if not manifests:  # the original generator's records: masked, with NSP, unless told otherwise
        values["dynamic_masking"] = bool(values["dynamic_masking"])
        values["nsp"] = True if values["nsp"] is None else values["nsp"]
    _require(values, d, bool(manifests))
    model_vocab = _model_vocab_size(config.model.vocab_size, values["vocab_size"], where)

    resolved = config.copy_and_resolve_references()
    with resolved.unlocked():
        for key, value in values.items():
            if value is not None:
                resolved.data[key] = type(d[key])(value) if d[key] is not None else value
        # A dynamic-masking choice: the run's own setting, else what data_prep was asked.
        resolved.data.whole_word_mask = bool(
            _first(d.get("whole_word_mask"), described.get("whole_word_mask"), False)
        )
        resolved.data.manifests = ",".join(manifests)
        resolved.model.vocab_size = model_vocab
    return resolved


def _first(*values):
    return next((v for v in values if not _unset(v)), None)


def _take(key: str, configured, described: dict, where: dict):
    """The config's value, or the manifest's when the config leaves it unset; both: equal."""
    if configured is None or (_unset(configured) and not key.endswith("_token_id")):
        return described.get(key)
    if key in described and described[key] != configured:
        raise cli.UserError(
            f"config.data.{key}={configured!r} conflicts with the data: {where[key]} says "
            f"{key}={described[key]!r}. Leave config.data.{key} unset (it then comes from the "
            "manifest), or point config.data.train_files at records written that way"
        )
    return configured


def _require(values: dict, d, described: bool) -> None:
    """Refuses facts that neither the config nor a manifest gave."""
    budget = (
        "dynamic masking's positions per sequence"
        if values["dynamic_masking"]
        else "the records' masked positions"
    )
    needed = [
        ("max_seq_length", "the records' sequence length, e.g. 128"),
        ("max_predictions_per_seq", f"{budget}, e.g. 20"),
    ]
    if values["dynamic_masking"]:
        needed += [(f"{n}_token_id", f"the vocabulary's [{n.upper()}] id") for n in SPECIAL]
    missing = [
        f"--config.data.{k} ({why})"
        for k, why in needed
        if values[k] is None or (values[k] == 0 and not k.endswith("_token_id"))
    ]
    if missing:
        where = (
            f"the manifest of {d.train_files!r} does not record them (a version-1 manifest whose "
            "vocabulary file is gone)"
            if described
            else f"the records in {d.train_files!r} have no manifest.json to say what they are"
        )
        raise cli.UserError(
            f"{where}: set {', '.join(missing)}"
            + ("" if described else "; or write them with data_prep, whose manifest says it all")
        )


def _model_vocab_size(configured: int, data_size: int | None, where: dict) -> int:
    if not configured:
        if not data_size:
            raise cli.UserError(
                "config.model.vocab_size is 0 (from the data) but the data's vocabulary size is "
                "unknown (records without a manifest.json): set --config.model.vocab_size "
                "(30522 for bert-base-uncased) or --config.data.vocab_file"
            )
        return int(data_size)
    if data_size and configured < data_size:
        raise cli.UserError(
            f"config.model.vocab_size={configured} is smaller than the data's vocabulary "
            f"({data_size} ids, {where.get('vocab_size', 'config.data.vocab_size')}): set it to "
            "0 to take the data's size, or larger to pad the embedding table"
        )
    return int(configured)
