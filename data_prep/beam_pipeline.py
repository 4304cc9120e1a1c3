r"""The scaled data_prep job as an Apache Beam pipeline (optional extra: pip install
'bert-jax[beam]').

  python -m data_prep.main --mode=beam --input=gs://b/wiki/*.txt --vocab_file=gs://b/vocab.txt \
      --output_dir=gs://b/records -- --runner=DataflowRunner --project=P --region=R \
      --temp_location=gs://b/tmp --setup_file=./setup.py

The same units, the same UnitProcessor per unit, the same shard plan and shuffles as the local
runner (job.py), so for the same settings the shards are byte-identical to --mode=scaled. Everything
after `--` is a Beam pipeline option: DirectRunner by default; DataflowRunner, FlinkRunner or
SparkRunner for clusters (docs/data_prep.md). All files go through Beam's FileSystems, so inputs,
vocabulary and output may be local or remote (gs://, s3://, hdfs://); shards are written under a
temporary name and renamed. There is no work directory: a failed pipeline is rerun whole (runners
retry failed work items themselves). A finished one is recognised from its manifest and checked
as the local job checks it (job.check_finished): an input changed since is an error, a shard that
is missing or of another size makes the whole pipeline run again.

Graph:  units -> ProcessUnit -> unit results --(counts)--> plan (side input)
        unit results -> pieces keyed by shard -> GroupByKey -> write shard -> manifest
"""

import json
import logging
import os
import shutil
import tempfile
import time

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from bert_jax import manifest as contract
from bert_jax import record_io, tokenization
from data_prep import content, job, output, readers


def _open(path: str):
    # Units seek into files and decompress gzip and bz2 themselves (and the plan sniffs content):
    # the raw bytes, whatever the suffix.
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _stat(path: str) -> dict | None:
    """content.local_stat over FileSystems: size and mtime (None when too recent to trust)."""
    matched = FileSystems.match([path])[0].metadata_list
    if not matched:
        return None
    mtime_ns = round(matched[0].last_updated_in_seconds * 1e9)
    recent = time.time_ns() - mtime_ns < content.RECENT_NS
    return {"size": matched[0].size_in_bytes, "mtime_ns": None if recent else mtime_ns}


def _size(path: str) -> int | None:
    matched = FileSystems.match([path])[0].metadata_list
    return matched[0].size_in_bytes if matched else None


class _Lister:
    """readers.parse_input's `match` over FileSystems; remembers the sizes it saw for the plan."""

    def __init__(self):
        self.sizes: dict[str, int] = {}

    def __call__(self, spec: str) -> list[str]:
        try:
            matched = FileSystems.match([spec])[0].metadata_list
        except Exception as e:  # FileSystems raises BeamIOError and others for unreadable locations
            raise readers.InputError(f"--input {spec!r} cannot be listed: {e}") from e
        self.sizes.update((m.path, m.size_in_bytes) for m in matched)
        return sorted(m.path for m in matched)


def _load_tokenizer(vocab_file: str, do_lower_case: bool, local_dir: str):
    """The tokenizer of a local or remote vocabulary, copied into local_dir (keeping .model /
    .txt)."""
    if not FileSystems.exists(vocab_file):
        raise tokenization.VocabError(
            f"vocabulary file {vocab_file!r} does not exist; pass --vocab_file"
        )
    local = os.path.join(local_dir, os.path.basename(vocab_file))
    with _open(vocab_file) as source, open(local, "wb") as out:
        shutil.copyfileobj(source, out)
    return tokenization.make_tokenizer(local, do_lower_case)


def _publish(local_path: str, final_path: str) -> None:
    """Copies a finished local file to its final place: a temporary name, then a rename."""
    tmp = f"{final_path}.tmp-{os.getpid()}"
    uncompressed = CompressionTypes.UNCOMPRESSED
    with (
        open(local_path, "rb") as source,
        FileSystems.create(tmp, compression_type=uncompressed) as out,
    ):
        shutil.copyfileobj(source, out, 1 << 20)
    FileSystems.rename([tmp], [final_path])  # replaces the file of an earlier run


class _ProcessUnit(beam.DoFn):
    """A unit -> its UnitResult, with a tokenizer per worker."""

    def __init__(self, spec: job.JobSpec, vocab_file: str, do_lower_case: bool):
        self.spec, self.vocab_file, self.do_lower_case = spec, vocab_file, do_lower_case

    def setup(self):
        self._dir = tempfile.mkdtemp(prefix="bert_jax_vocab_")
        self.processor = job.UnitProcessor(
            self.spec, _load_tokenizer(self.vocab_file, self.do_lower_case, self._dir)
        )

    def process(self, unit):
        yield self.processor.process(unit, open_binary=_open)

    def teardown(self):
        shutil.rmtree(self._dir, ignore_errors=True)


def _summary(result, stats: dict) -> dict:
    """A unit's counts for the shard plan, and its job.UnitSummary for the manifest."""
    return {
        "unit": result.unit.index,
        **{split: (r.count, len(r.data)) for split, r in result.splits.items()},
        "summary": job.UnitSummary(
            result.read,
            {split: r.stats for split, r in result.splits.items()},
            {split: r.documents for split, r in result.splits.items()},
            content.record(result.content, stats.get(result.unit.path)),
        ),
    }


def _plan(summaries: list, spec: job.JobSpec) -> dict:
    """The shard plan of job.plan_shards, also indexed by unit: unit -> [(split, shard, count, rank,
    a, b)]."""
    summaries = sorted(summaries, key=lambda s: s["unit"])
    by_unit, shards = {}, {}
    for split in job.SPLITS:
        counts = [s[split][0] for s in summaries]
        shards[split] = job.plan_shards(spec, split, counts, sum(s[split][1] for s in summaries))
        if split == "train" and not shards[split]:
            raise job.no_instances_error(spec, [s["summary"].read for s in summaries])
        for shard, pieces in enumerate(shards[split]):
            for rank, (unit, first, end) in enumerate(pieces):
                by_unit.setdefault(unit, []).append(
                    (split, shard, len(shards[split]), rank, first, end)
                )
    return {"shards": {split: len(plan) for split, plan in shards.items()}, "by_unit": by_unit}


def _pieces(result, plan: dict):
    """A unit's records, cut into the pieces the plan gives each shard."""
    for split, shard, count, rank, first, end in plan["by_unit"].get(result.unit.index, []):
        records = result.splits[split]
        data, offsets = records.data, records.offsets.tolist()
        yield (
            (split, shard, count),
            (rank, [data[offsets[k] : offsets[k + 1]] for k in range(first, end)]),
        )


def _write_shard(keyed, spec: job.JobSpec, output_dir: str):
    (split, shard, count), pieces = keyed
    records = [record for _, part in sorted(pieces, key=lambda p: p[0]) for record in part]
    name = job.shard_file(spec, split, shard, count)
    with tempfile.TemporaryDirectory(prefix="bert_jax_shard_") as local_dir:
        local = os.path.join(local_dir, name)
        with record_io.RecordWriter(local, spec.fmt) as writer:
            for j in job.shard_order(spec, split, shard, len(records)).tolist():
                writer.write(records[j])
        info = output.shard_entry(local, len(records))
        _publish(local, FileSystems.join(output_dir, name))
    return split, shard, info


def _write_manifest(
    infos: list, summaries: list, spec, fp, planned, started: float, report: dict, output_dir
):
    shards = {
        split: [info for s, _, info in sorted(infos, key=lambda i: (i[0], i[1])) if s == split]
        for split in job.SPLITS
    }
    units = [s["summary"] for s in sorted(summaries, key=lambda s: s["unit"])]
    manifest = job.manifest(
        spec, fp, shards, planned, units, seconds=time.time() - started, **report
    )
    with tempfile.TemporaryDirectory() as local_dir:
        local = os.path.join(local_dir, contract.FILE)
        output.write_json_atomic(local, manifest)
        _publish(local, FileSystems.join(output_dir, contract.FILE))


def _read_manifest(output_dir: str) -> dict | None:
    path = FileSystems.join(output_dir, contract.FILE)
    if not FileSystems.exists(path):
        return None
    with _open(path) as f:
        try:
            manifest = json.loads(f.read().decode("utf-8"))
        except ValueError as e:
            raise output.OutputError(
                f"{path} is unreadable ({e}); delete it and rerun the job to rebuild the output"
            ) from None
    return manifest


def run(
    spec: job.JobSpec,
    vocab_file: str,
    do_lower_case: bool,
    output_dir: str,
    pipeline_args=(),
    flags: dict | None = None,
) -> dict:
    """Builds and runs the pipeline (waiting for it); returns the manifest written next to the
    shards."""
    started = time.time()
    lister = _Lister()
    sources = readers.parse_input(
        list(spec.inputs), lister, _open, document_per_file=spec.document_per_file
    )
    planned = job.plan(spec, sources, size_of=lister.sizes.__getitem__, open_binary=_open)
    with tempfile.TemporaryDirectory() as local_dir:  # a bad vocabulary fails here, not on a worker
        tokenizer = _load_tokenizer(vocab_file, do_lower_case, local_dir)
        vocab_md5 = contract.file_md5(vocab_file, _open)
        vocab = contract.vocab_entry(tokenizer, file=vocab_file, md5=vocab_md5)
    fp = job.fingerprint(spec, planned, vocab_md5, do_lower_case)
    finished = _read_manifest(output_dir)
    if finished is not None:
        damaged = job.check_finished(
            spec, planned, fp, finished, output_dir, stat=_stat, open_binary=_open, size_of=_size
        )
        if not damaged:
            return finished
        # Rebuilt whole (no work directory); the manifest goes first, so that none describes a
        # half-rebuilt output.
        FileSystems.delete([FileSystems.join(output_dir, contract.FILE)])
    if "://" not in output_dir:
        output.prepare_output_dir(output_dir)
    stats = {unit.path: _stat(unit.path) for unit in planned if unit.kind != "tfds"}
    # A DoFn's exception reaches the caller, where data_prep.main prints bad input as one error
    # line (and a bug with its traceback); an in-process runner would first log it with a traceback.
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    options = PipelineOptions(list(pipeline_args))
    runner = options.get_all_options().get("runner") or "DirectRunner"
    with beam.Pipeline(options=options) as p:
        results = (
            p
            | "Units" >> beam.Create(planned)
            | "ProcessUnit" >> beam.ParDo(_ProcessUnit(spec, vocab_file, do_lower_case))
        )
        summaries = results | "Summarize" >> beam.Map(_summary, stats=stats)
        plan = (
            summaries
            | "AllSummaries" >> beam.combiners.ToList()
            | "Plan" >> beam.Map(_plan, spec=spec)
        )
        infos = (
            results
            | "Pieces" >> beam.FlatMap(_pieces, plan=beam.pvalue.AsSingleton(plan))
            | "ByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.Map(_write_shard, spec=spec, output_dir=output_dir)
        )
        _ = (
            infos
            | "AllShards" >> beam.combiners.ToList()
            | "Manifest"
            >> beam.Map(
                _write_manifest,
                summaries=beam.pvalue.AsList(summaries),
                spec=spec,
                fp=fp,
                planned=planned,
                started=started,
                report={
                    "vocab": vocab,
                    "flags": flags or {},
                    "runner": f"beam: {runner}",
                },
                output_dir=output_dir,
            )
        )
    return _read_manifest(output_dir)
