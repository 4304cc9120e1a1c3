"""The scaled data_prep job, its pure parts: spec, plan, shard plan, fingerprint and manifest.
With job_units.py, a function of the settings and the input, never of the worker count or the
runner (scaled.py, beam_pipeline.py). docs/data_prep.md, "Scaled mode: how it works".
"""

import dataclasses
import glob
import math
from collections.abc import Callable

import numpy as np

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, record_io
from bert_jax.storage import workdir_lock
from bert_jax.text import tokenization
from data_prep import content, output, readers
from data_prep import instances as inst
from data_prep import units as units_lib
from data_prep.sentences import DEFAULT_LANGUAGE, language_code

SPLITS = manifest.SPLITS  # a split's place here is part of its random seeds
_STREAM = {"structure": 1, "mask": 2, "unit_order": 3, "shuffle": 4}


class JobMismatch(cli.UserError):
    """An output directory holding (part of) a job with other settings."""


class NoInstances(cli.UserError):
    """The input gave no training instance: nothing worth resuming (resume.WorkDir.running)."""


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """Everything that decides the scaled job's output."""

    inputs: tuple
    opts: inst.InstanceOptions = dataclasses.field(default_factory=inst.InstanceOptions)
    dupe_factor: int = 10  # passes over the training documents, each with other random choices
    seed: int = 12345
    eval_fraction: float = 0.01  # of documents, held out (one pass, no dupes)
    # Masked share of the eval split, whatever opts.masked_lm_prob: recipes' accuracies compare.
    eval_masked_lm_prob: float = manifest.MASKED_LM_PROB
    block_size_mb: float = 1.0  # text/JSONL files are cut into units of this many MB
    tfds_examples_per_unit: int = 1000
    fmt: str = record_io.ARRAYRECORD
    num_shards: int = 0  # training shards; 0: as many as shard_size_mb asks for
    num_eval_shards: int = 0
    shard_size_mb: float = 128.0  # target record bytes per shard when the count is not given
    text_field: str = readers.TEXT_FIELD
    tfds_data_dir: str | None = None
    document_per_file: bool = False  # BookCorpus-style text: each file one document
    language: str = DEFAULT_LANGUAGE  # sentence rules of running text; a dump's own overrides it

    def __post_init__(self):
        problems = []
        if self.dupe_factor < 1:
            problems.append(f"dupe_factor={self.dupe_factor} must be at least 1")
        if not 0.0 <= self.eval_fraction < 1.0:
            problems.append(f"eval_fraction={self.eval_fraction} must be in [0, 1)")
        if not 0.0 < self.eval_masked_lm_prob <= 1.0:
            problems.append(f"eval_masked_lm_prob={self.eval_masked_lm_prob} must be in (0, 1]")
        for name in ("block_size_mb", "shard_size_mb"):
            size = getattr(self, name)
            if not (size > 0 and math.isfinite(size)):  # nan fails both; inf has no int
                problems.append(f"{name}={size} must be a positive number")
        if self.num_shards < 0 or self.num_eval_shards < 0 or self.tfds_examples_per_unit < 1:
            problems.append(
                "num_shards and num_eval_shards must be >= 0, tfds_examples_per_unit >= 1"
            )
        record_io.suffix(self.fmt)
        try:  # stored as sentencex takes it ("EN", "simple": "en")
            object.__setattr__(self, "language", language_code(self.language))
        except ValueError as e:
            problems.append(f"language: {e}")
        if problems:
            raise cli.UserError("; ".join(problems))


def plan(spec: JobSpec, output_dir: str = "") -> list[units_lib.Unit]:
    """The job's units, from its inputs; never the job's own output in `output_dir`."""
    sources = readers.parse_input(
        list(spec.inputs),
        match=outside(output_dir) if output_dir else readers.match_files,
        document_per_file=spec.document_per_file,
    )
    return units_lib.plan_units(
        sources,
        max(1, int(spec.block_size_mb * units_lib.MB)),
        spec.tfds_examples_per_unit,
        spec.tfds_data_dir,
        text_field=spec.text_field,
    )


def check_inputs_are_not_the_vocabulary(specs, vocab_file: str) -> None:
    """Raises readers.InputError when an --input names or matches `vocab_file` (or a SentencePiece
    model's .vocab): read as text, its entries would silently become a document."""
    vocab_files = [vocab_file]
    if vocab_file.endswith(".model"):
        vocab_files.append(vocab_file.removesuffix(".model") + ".vocab")
    vocabulary = {storage.real_path(p): p for p in vocab_files}
    for spec in specs:
        spec = spec.strip()
        if not spec or spec.startswith("tfds:"):
            continue
        found = [p for p in readers.expand(spec) if storage.real_path(p) in vocabulary]
        if found:
            raise readers.InputError(
                f"--input={spec!r} {'matches' if glob.has_magic(spec) else 'is'} the vocabulary "
                f"{found[0]!r} (--vocab_file={vocab_file!r}): read as text, its entries would "
                "become a document of the corpus; move the vocabulary out of the corpus's "
                "directory or narrow the pattern"
            )


def outside(output_dir: str) -> Callable[[str], list[str]]:
    """readers.match_files less the job's own output, which a rerun's glob may match: skipped with
    a warning; an input that is nothing but it is refused."""
    out = output_dir.rstrip("/")
    real_out = storage.real_path(out)

    def inside(path: str) -> bool:
        """Whether `path` is the output directory or a file the job writes there (not any file
        under it: records may be written into the corpus's own directory)."""
        real = storage.real_path(path)
        if real == real_out:
            return True
        if not real.startswith(real_out + "/"):
            return False
        name, _, deeper = real[len(real_out) + 1 :].partition("/")
        if name == manifest.WORK_DIR:
            return True
        return not deeper and bool(
            name in (manifest.FILE, workdir_lock.LOCK_NAME)
            or manifest.SHARD_NAME.match(name)
            or manifest.TEMPORARY.search(name)
            or name.startswith(".write-test-")
        )

    def match(spec: str) -> list[str]:
        paths = readers.expand(spec)
        own = [p for p in paths if inside(p)]
        if own and len(own) == len(paths):
            raise readers.InputError(
                f"--input={spec!r} names this job's own output (--output_dir={output_dir!r}: "
                f"{own[0]}{' ...' if len(own) > 1 else ''}), not a corpus: pass the text the "
                "records are made from"
            )
        if own:
            cli.warn(
                f"--input={spec!r} also matches {len(own)} path(s) of this job's own output "
                f"(--output_dir={output_dir!r}, e.g. {own[0]}): skipped, they are not input"
            )
        return readers.checked([p for p in paths if not inside(p)])

    return match


def load_tokenizer(vocab_file: str, do_lower_case: bool):
    """The tokenizer of --vocab_file; a bucket object is fetched once into the local cache."""
    if storage.is_url(vocab_file):
        why = storage.not_a_file(vocab_file)  # the words a local path gets (cli.not_a_file)
        if why:
            raise tokenization.VocabError(
                f"vocabulary file {vocab_file!r} {why}; pass --vocab_file"
            )
        local = storage.local_copy(vocab_file)
        with storage.reported_as(local, vocab_file):  # its errors name the bucket's file
            return tokenization.make_tokenizer(local, do_lower_case)
    return tokenization.make_tokenizer(vocab_file, do_lower_case)


def fingerprint(spec: JobSpec, planned: list[units_lib.Unit], vocab: dict) -> dict:
    """What a rerun must match to reuse work: "units" for unit files, "shards" for shards."""
    sources = {}
    for unit in planned:  # a source's extent: bytes, examples, or what the plan saw (unit.extent)
        key = content.source_key(unit)
        sources[key] = unit.extent or max(sources.get(key, 0), unit.stop)
    opts = dataclasses.asdict(spec.opts)
    # Under the flag's name, as older job.json files record it: their work is still reused.
    opts["do_whole_word_mask"] = opts.pop("whole_word_mask")
    if spec.eval_masked_lm_prob != spec.opts.masked_lm_prob and spec.opts.mask:
        # Only where it changes the records: older jobs keep their fingerprint.
        opts["eval_masked_lm_prob"] = spec.eval_masked_lm_prob
    unit_fields = (
        "dupe_factor seed eval_fraction block_size_mb tfds_examples_per_unit text_field "
        "document_per_file language"
    ).split()
    return {
        "units": {
            **opts,
            **{name: getattr(spec, name) for name in unit_fields},
            "vocab_md5": vocab["md5"],
            "do_lower_case": vocab["do_lower_case"],
            "inputs": sources,
        },
        "shards": {
            "format": spec.fmt,
            "num_shards": spec.num_shards,
            "num_eval_shards": spec.num_eval_shards,
            "shard_size_mb": spec.shard_size_mb,
        },
    }


def differences(old: dict | None, new: dict, parts=("units", "shards")) -> str:
    if not old:
        return "it was written by another mode or an older version"
    diffs = []
    for part in parts:
        for key in sorted(set(old.get(part, {})) | set(new[part])):
            a, b = old.get(part, {}).get(key), new[part].get(key)
            if a != b:
                diffs.append(
                    "input files or their sizes" if key == "inputs" else f"{key}: {a!r} -> {b!r}"
                )
    return "; ".join(diffs)


def seed(spec: JobSpec, stream: str, *keys) -> list[int]:
    return [spec.seed, _STREAM[stream], *keys]


def shard_count(spec: JobSpec, split: str, instances: int, record_bytes: int) -> int:
    """Shards of a split: as asked, or enough that none holds much more than shard_size_mb."""
    if instances == 0:
        return 0
    asked = spec.num_shards if split == "train" else spec.num_eval_shards
    if asked > instances:
        flag = "--num_shards" if split == "train" else "--num_eval_shards"
        raise cli.UserError(
            f"{flag}={asked} but the {split} split has only {instances} instances; "
            f"rerun with {flag} <= {instances} (finished work units are reused)"
        )
    return asked or max(
        1, min(instances, math.ceil(record_bytes / (spec.shard_size_mb * units_lib.MB)))
    )


def plan_shards(spec: JobSpec, markers: list[dict]) -> dict[str, list[list[tuple]]]:
    """Per split, per shard, its pieces (unit index, first record, end record) in order: sizes
    differ by at most one, each shard reads a few units (in a seeded order) sequentially.
    `markers`: every unit's UnitResult.marker, in plan order."""
    plans = {}
    for split in SPLITS:
        counts = [m[split]["instances"] for m in markers]
        total = sum(counts)
        num = shard_count(spec, split, total, sum(m[split]["bytes"] for m in markers))
        order = np.random.default_rng(seed(spec, "unit_order", SPLITS.index(split))).permutation(
            len(counts)
        )
        ends = np.cumsum([counts[u] for u in order]).tolist()
        plans[split], position, k = [], 0, 0
        for shard in range(num):
            stop, pieces = total * (shard + 1) // num, []
            while position < stop:
                unit = int(order[k])
                unit_start = ends[k] - counts[unit]
                take_to = min(stop, ends[k])
                pieces.append((unit, position - unit_start, take_to - unit_start))
                position = take_to
                if position == ends[k]:
                    k += 1
            plans[split].append(pieces)
    if not plans["train"]:
        raise no_instances_error(spec.inputs, spec.text_field, [m["read"] for m in markers])
    return plans


def shard_order(spec: JobSpec, split: str, shard: int, count: int) -> np.ndarray:
    """The seeded shuffle of a shard: output record j is concatenated record order[j]."""
    return np.random.default_rng(seed(spec, "shuffle", SPLITS.index(split), shard)).permutation(
        count
    )


def no_instances_error(inputs, text_field: str, reads: list[dict]) -> NoInstances:
    documents = sum(r["documents"] for r in reads)
    bad_json = sum(r["bad_json_lines"] for r in reads)
    seen = f"{documents} documents read from --input={','.join(inputs)}"
    if bad_json:
        seen += f"; {bad_json} JSON lines were not objects with a string field {text_field!r}"
    return NoInstances(
        f"the input gave no training instances ({seen}); check --input and --text_field"
    )


def manifest_fields(
    spec: JobSpec,
    fp: dict,
    shards: dict,
    planned: list,
    markers: list,
    *,
    vocab: dict,
    flags: dict,
    seconds: float,
    runner: str,
) -> dict:
    """manifest.json: the data contract, then this job's report: settings, input fingerprint,
    statistics. `markers[i]`: unit i's UnitResult.marker."""
    read = readers.ReadStats()
    split_stats = {split: output.InstanceStats() for split in SPLITS}
    split_documents = dict.fromkeys(SPLITS, 0)
    for marker in markers:
        read.add(readers.ReadStats(**marker["read"]))
        for split in SPLITS:
            split_stats[split].add(output.InstanceStats(**marker[split]["stats"]))
            split_documents[split] += marker[split]["documents"]
    opts = spec.opts
    out = opts.contract_fields("scaled", spec.fmt, vocab, shards)
    out.update(
        runner=runner,
        flags=flags,
        fingerprint=fp,
        inputs=content.input_files(planned, [marker["content"] for marker in markers]),
        read=dataclasses.asdict(read),
        # The file inputs as stored (compressed): the MB/s figures'.
        input_bytes=sum(unit.size for unit in planned if units_lib.KINDS[unit.kind].is_file),
        documents=sum(split_documents.values()),
        stats=split_stats["train"].summary(opts.max_seq_length),
        eval={
            "fraction": spec.eval_fraction,
            "masked_lm_prob": spec.eval_masked_lm_prob if opts.mask else None,
            "documents": split_documents["eval"],
            "stats": split_stats["eval"].summary(opts.max_seq_length),
        },
        seconds=round(seconds, 3),
    )
    return out
