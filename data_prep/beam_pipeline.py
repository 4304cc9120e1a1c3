"""The scaled data_prep job as an Apache Beam pipeline (`--mode=beam`, extra 'bert-jax[beam]'): the
local runner's functions (job.py), so the shards are byte-identical. docs/data_prep.md, "Beam mode".
Graph:  units -> ProcessUnit -> unit results --(counts)--> plan (side input)
        unit results -> pieces keyed by shard -> GroupByKey -> write shard -> manifest
"""

import contextlib
import functools
import io
import logging
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners import runner as runner_lib

from bert_jax import cli, storage
from bert_jax.data.contract import manifest, record_io
from data_prep import content, job, job_units, output, resume
from data_prep import units as units_lib


class _ProcessUnit(beam.DoFn):
    """A unit -> its UnitResult, with a tokenizer per worker."""

    def __init__(self, spec: job.JobSpec, vocab_file: str, do_lower_case: bool):
        self.spec, self.vocab_file, self.do_lower_case = spec, vocab_file, do_lower_case

    def setup(self):
        self.processor = job_units.UnitProcessor(
            self.spec, job.load_tokenizer(self.vocab_file, self.do_lower_case)
        )

    def process(self, unit):
        yield self.processor.process(unit)


def _in_order(markers: list) -> list:
    return sorted(markers, key=lambda m: m["unit"]["index"])


def _plan(markers: list, spec: job.JobSpec) -> dict:
    """job.plan_shards by unit: unit -> [(split, shard, count, rank, first, end)]."""
    by_unit = {}
    for split, shards in job.plan_shards(spec, _in_order(markers)).items():
        for shard, pieces in enumerate(shards):
            for rank, (unit, first, end) in enumerate(pieces):
                by_unit.setdefault(unit, []).append((split, shard, len(shards), rank, first, end))
    return by_unit


def _pieces(result, plan: dict):
    """A unit's records, cut into the pieces the plan gives each shard."""
    for split, shard, count, rank, first, end in plan.get(result.unit.index, []):
        records = result.splits[split]
        data, offsets = records.data, records.offsets.tolist()
        yield (
            (split, shard, count),
            (rank, [data[offsets[k] : offsets[k + 1]] for k in range(first, end)]),
        )


def _write_shard(keyed, spec: job.JobSpec, output_dir: str):
    (split, shard, count), pieces = keyed
    records = [record for _, part in sorted(pieces, key=lambda p: p[0]) for record in part]
    path = storage.join(output_dir, output.shard_name(split, shard, count, spec.fmt))
    with output.local_file(path) as local:
        with record_io.RecordWriter(local, spec.fmt) as writer:
            for j in job.shard_order(spec, split, shard, len(records)).tolist():
                writer.write(records[j])
        info = output.shard_entry(local, len(records))
    return split, shard, info


def _write_manifest(infos: list, markers: list, spec, fp, planned, started, output_dir, **report):
    shards = {
        split: [info for s, _, info in sorted(infos, key=lambda i: (i[0], i[1])) if s == split]
        for split in job.SPLITS
    }
    fields = job.manifest_fields(
        spec, fp, shards, planned, _in_order(markers), seconds=time.time() - started, **report
    )
    output.write_json_atomic(storage.join(output_dir, manifest.FILE), fields)


def _options(pipeline_args) -> tuple[PipelineOptions, str, object]:
    """The pipeline options, runner name and runner; a bad option or runner is a user error."""
    options = PipelineOptions(list(pipeline_args))
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            name = options.get_all_options().get("runner") or "DirectRunner"
    except SystemExit:
        last = (said.getvalue().strip().splitlines() or ["invalid"])[-1]
        raise cli.UserError(
            f"Beam pipeline options after --: {last.split('error: ', 1)[-1]}"
        ) from None
    try:
        return options, name, runner_lib.create_runner(name)
    except ValueError as e:
        raise cli.UserError(f"Beam pipeline option --runner={name}: {e}") from None


def run(
    spec: job.JobSpec,
    vocab_file: str,
    do_lower_case: bool,
    output_dir: str,
    pipeline_args=(),
    flags: dict | None = None,
) -> dict:
    """Builds and runs the pipeline; returns the manifest written next to the shards."""
    started = time.time()
    options, runner, runner_object = _options(pipeline_args)  # before anything is written
    planned = job.plan(spec, output_dir)
    # A bad vocabulary fails here, not on a worker.
    vocab = manifest.vocab_entry(job.load_tokenizer(vocab_file, do_lower_case), file=vocab_file)
    fp = job.fingerprint(spec, planned, vocab)
    # The work directory holds only job.json (the pipeline is rerun whole): no two jobs mix.
    work = resume.WorkDir(output_dir)
    finished, damaged = work.finished(spec, planned, fp)
    if finished is not None and not damaged:
        return finished
    output.prepare_output_dir(output_dir)
    with work.running(fp, finished, damaged):
        write_manifest = functools.partial(
            _write_manifest,
            spec=spec,
            fp=fp,
            planned=planned,
            started=started,
            output_dir=output_dir,
            vocab=vocab,
            flags=flags or {},
            runner=f"beam: {runner}",
        )
        try:
            _run_pipeline(
                spec,
                _ProcessUnit(spec, vocab_file, do_lower_case),
                planned,
                output_dir,
                beam.Pipeline(runner=runner_object, options=options),
                write_manifest,
            )
        except RuntimeError as e:
            # An OSError (a full disk) Beam could not rebuild arrives as a RuntimeError: the
            # original is raised, reported as one line.
            cause = e.__cause__ or e.__context__
            if isinstance(cause, OSError) and str(cause) in str(e):
                raise cause from None
            raise
        written = output.read_manifest(output_dir)
        work.remove_other_shards(written["shards"])
    return written


def _run_pipeline(spec, process_unit, planned, output_dir, pipeline, write_manifest):
    stats = {
        unit.path: content.file_stat(unit.path)
        for unit in planned
        if units_lib.KINDS[unit.kind].is_file
    }
    # A DoFn's exception reaches the caller, which reports it: no logged traceback first.
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    with pipeline as p:
        results = p | "Units" >> beam.Create(planned) | "ProcessUnit" >> beam.ParDo(process_unit)
        markers = results | "Summarize" >> beam.Map(
            lambda result, stats: result.marker(stats.get(result.unit.path)), stats=stats
        )
        plan = (
            markers
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
            | "Manifest" >> beam.Map(write_manifest, markers=beam.pvalue.AsList(markers))
        )
