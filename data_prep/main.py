"""Raw text -> masked MLM/NSP training records; the modes and --verify: docs/data_prep.md.

python -m data_prep.main --input='corpus/*.txt' --vocab_file=vocab.txt --output_dir=/tmp/records
"""

import dataclasses
import os
import sys

from absl import flags

from bert_jax import cli, storage
from bert_jax.data.contract import record_io
from bert_jax.data.input import masking
from bert_jax.text import tokenization
from data_prep import instances, job, output, reference, sentences

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "input",
    None,
    "Input files and globs: BERT-format text (plain or gzip), .jsonl JSON lines, MediaWiki XML "
    "dumps (.xml, .xml.bz2, multistream with its index beside it), Parquet files; or "
    "tfds:NAME[:SPLIT]. The kind is read from each file's first bytes. Files and globs may be "
    "gs:// or s3:// URLs.",
)
flags.DEFINE_string(
    "output_dir", None, "Directory for the record shards and manifest.json; may be gs:// or s3://."
)
flags.DEFINE_string(
    "vocab_file",
    None,
    "WordPiece vocab.txt, a SentencePiece .model file, or a Hugging Face tokenizer.json (BPE, "
    "Unigram, WordPiece; python -m data_prep.vocab --model_type=bpe trains one); may be gs:// "
    "or s3://.",
)
flags.DEFINE_bool(
    "do_lower_case", tokenization.DO_LOWER_CASE, "Lower-case and strip accents (uncased models)."
)
# The homes of the flags' defaults: the instance options' and the job spec's fields.
_DEFAULT = instances.InstanceOptions()
_SPEC = {f.name: f.default for f in dataclasses.fields(job.JobSpec)}
flags.DEFINE_bool(
    "do_whole_word_mask", _DEFAULT.whole_word_mask, "Mask all pieces of a word together."
)
# The records' arrays are indexed in int32: a longer length failed in numpy mid-job.
_MAX_LENGTH = 2**31 - 1
flags.DEFINE_integer(
    "max_seq_length",
    _DEFAULT.max_seq_length,
    "Tokens per instance, [CLS]/[SEP] included.",
    upper_bound=_MAX_LENGTH,
)
flags.DEFINE_integer(
    "max_predictions_per_seq",
    _DEFAULT.max_predictions_per_seq,
    "Most masked positions per instance.",
    upper_bound=_MAX_LENGTH,
)
flags.DEFINE_float(
    "masked_lm_prob",
    _DEFAULT.masked_lm_prob,
    "Fraction of tokens to mask (0.15: BERT's; ModernBERT's recipe: 0.3).",
)
flags.DEFINE_float(
    "eval_masked_lm_prob",
    _SPEC["eval_masked_lm_prob"],
    "Fraction of tokens masked in the eval split, whatever --masked_lm_prob, so that held-out "
    "accuracies of recipes that train at other rates compare. Scaled and Beam modes.",
)
flags.DEFINE_float(
    "short_seq_prob", _DEFAULT.short_seq_prob, "Probability of a shorter-than-maximum instance."
)
flags.DEFINE_integer(  # bounded as the lengths: 2**63 ("no limit") looped on, never an error
    "dupe_factor",
    _SPEC["dupe_factor"],
    "Passes over the corpus, each with different masks.",
    lower_bound=1,
    upper_bound=_MAX_LENGTH,
)
flags.DEFINE_integer("random_seed", _SPEC["seed"], "Seed of every random choice.", lower_bound=0)
flags.DEFINE_enum("format", _SPEC["fmt"], record_io.FORMATS, "Record file format.")
flags.DEFINE_enum(
    "mode",
    "scaled",
    ["scaled", "beam", "reference"],
    "scaled: streaming, parallel, resumable (default); beam: the same job on Apache Beam; "
    "reference: the original generator's exact output, whole corpus in memory.",
)
flags.DEFINE_bool(
    "nsp",
    _DEFAULT.nsp,
    "Next-sentence-prediction pairs; false gives MLM-only full-length segments.",
)
flags.DEFINE_bool(
    "dynamic_masking", not _DEFAULT.mask, "Write unmasked records; the trainer masks on the fly."
)
flags.DEFINE_string(
    "text_field",
    _SPEC["text_field"],
    "Text field of JSONL records, Parquet columns and TFDS examples.",
)
flags.DEFINE_bool(
    "document_per_file",
    _SPEC["document_per_file"],
    "Each text file is one document, its lines paragraphs split into sentences (BookCorpus-style "
    "books: no blank lines between documents). Scaled and Beam modes.",
)
flags.DEFINE_string(
    "language",
    _SPEC["language"],
    "Language of the corpus (ISO 639 / Wikimedia code: en, de, fr, zh, ...): the rules that split "
    "JSONL, Parquet, TFDS and book text into sentences. A Wikipedia dump's own language (its "
    "<siteinfo>) overrides it. Scaled and Beam modes.",
)
flags.DEFINE_string("tfds_data_dir", _SPEC["tfds_data_dir"], "data_dir of TFDS datasets.")
flags.DEFINE_integer(
    "num_workers",
    os.cpu_count() or 1,
    "Worker processes (scaled mode; 0 or 1: in this process); the output does not depend on it.",
    lower_bound=0,
)
flags.DEFINE_float(
    "eval_fraction",
    _SPEC["eval_fraction"],
    "Fraction of documents held out as the eval split (0: none).",
)
flags.DEFINE_float(
    "block_size_mb",
    _SPEC["block_size_mb"],
    "Text and JSONL files are cut into work units of this size; multistream dumps (by their "
    "index) and Parquet files (by row groups) into units of about this many stored bytes.",
)
flags.DEFINE_integer(
    "tfds_examples_per_unit", _SPEC["tfds_examples_per_unit"], "TFDS examples per work unit."
)
flags.DEFINE_integer(
    "num_shards",
    _SPEC["num_shards"],
    "Training shards; 0 picks enough for about --shard_size_mb each.",
    lower_bound=0,
    upper_bound=_MAX_LENGTH,
)
flags.DEFINE_integer(
    "num_eval_shards",
    _SPEC["num_eval_shards"],
    "Eval shards; 0 picks enough for about --shard_size_mb each.",
    lower_bound=0,
    upper_bound=_MAX_LENGTH,
)
flags.DEFINE_float(
    "shard_size_mb",
    _SPEC["shard_size_mb"],
    "Target record bytes per shard when the count is not given.",
)
flags.DEFINE_bool("progress", True, "Show a progress bar (scaled mode).")
flags.DEFINE_bool(
    "verify",
    False,
    "Only re-check the shards in --output_dir against its manifest's md5s: exit status 0 when "
    "all match, else one error line naming the bad files and status 2.",
)

_PATH_FLAGS = ("input", "vocab_file", "output_dir", "tfds_data_dir")  # local or bucket paths
# Flags that do not shape the records; the manifest's "flags" records every other one.
_NOT_RECORDED = ("output_dir", "tfds_data_dir", "num_workers", "progress", "verify")
# Flags reference mode would ignore, and why: passing one there is an error, and a reference
# manifest leaves them out.
_SCALED_FLAGS = {
    "document_per_file": "reads BERT-format text as the original does",
    "language": "reads BERT-format text as the original does",
    "eval_masked_lm_prob": "writes no eval split",
    "eval_fraction": "writes no eval split",
    "num_eval_shards": "writes no eval split",
    "num_shards": "writes one shard, as the original does",
    "shard_size_mb": "writes one shard, as the original does",
    "block_size_mb": "reads its whole input in one process",
    "tfds_examples_per_unit": "reads its whole input in one process",
}


def _from_flags(cls, **renamed):
    named = [f.name for f in dataclasses.fields(cls) if f.name not in renamed]
    return cls(**{name: FLAGS[name].value for name in named}, **renamed)


def options_from_flags() -> instances.InstanceOptions:
    return _from_flags(
        instances.InstanceOptions,
        whole_word_mask=FLAGS.do_whole_word_mask,
        mask=not FLAGS.dynamic_masking,
    )


def spec_from_flags() -> job.JobSpec:
    return _from_flags(
        job.JobSpec,
        inputs=tuple(FLAGS.input),
        opts=options_from_flags(),
        seed=FLAGS.random_seed,
        fmt=FLAGS.format,
    )


def _recorded_flags() -> dict:
    """This module's flags (absl knows where each was defined) that a manifest records."""
    return {
        flag.name: flag.value
        for flag in FLAGS.get_flags_for_module(sys.modules[__name__])
        if flag.name not in _NOT_RECORDED
        and (FLAGS.mode != "reference" or flag.name not in _SCALED_FLAGS)
    }


def _summary(manifest: dict) -> None:
    stats, read, seconds = manifest["stats"], manifest["read"], max(manifest["seconds"], 1e-9)
    if manifest["mode"] == "reference":
        print(
            f"wrote {stats['instances']} instances from {manifest['documents']} documents "
            f"to {FLAGS.output_dir} in {seconds:.1f}s"
        )
    else:
        held_out = manifest["eval"]
        print(
            f"wrote {stats['instances']} training and {held_out['stats']['instances']} eval "
            f"instances from {manifest['documents']} documents ({held_out['documents']} held out) "
            f"to {FLAGS.output_dir} "
            f"in {seconds:.1f}s: {manifest['input_bytes'] / seconds / 1e6:.2f} MB/s of text, "
            f"{(stats['instances'] + held_out['stats']['instances']) / seconds:.0f} instances/s"
        )
        counts = []
        for split in ("train", "eval"):
            entries = manifest["shards"][split]
            counts.append(f"{split} {len(entries)} x {entries[0]['instances'] if entries else 0}")
        print("shards: " + ", ".join(counts))
    print(
        f"{stats['mean_tokens_per_instance']:.1f} tokens/instance, "
        f"padding {stats['padding_fraction']:.3f}, "
        f"mask rate {stats['mask_rate']:.3f}, random next {stats['random_next_fraction']:.3f}"
    )
    if manifest.get("nsp") and stats["instances"] >= 20 and stats["random_next_fraction"] > 0.9:
        # Far above the original's half: most documents hold one sentence (or segment).
        cli.warn(
            f"{stats['random_next_fraction']:.0%} of next-sentence pairs are random (the "
            "original's rate is about half): most documents hold a single sentence, so "
            "next-sentence prediction has nothing to learn from them. For a corpus of one "
            "sentence per row or line (Hugging Face's bookcorpus), pass --nsp=false, or use whole "
            "books as text files with --document_per_file",
        )
    if read.get("pages"):
        print(
            f"wiki pages: {read['pages']} read, {read['skipped_pages']} skipped (other namespaces, "
            "redirects, disambiguation, no prose); sentences left broken by removed markup: "
            f"{read.get('repaired_sentences', 0)} repaired (a leading comma), "
            f"{read.get('dropped_sentences', 0)} dropped (lost their math, list or items)"
        )
    skipped = {k: v for k, v in read.items() if k.startswith(("bad_", "empty_", "long_")) and v}
    if skipped:
        print(f"skipped or repaired: {skipped}")


def _check_flags(argv) -> None:
    if not FLAGS.output_dir:
        raise cli.UserError("pass --output_dir")
    if FLAGS.verify:
        return
    missing = [name for name in ("input", "vocab_file") if not FLAGS[name].value]
    if missing:
        raise cli.UserError(f"pass {' and '.join('--' + m for m in missing)}")
    if len(argv) > 1 and FLAGS.mode != "beam":
        raise cli.UserError(
            f"unexpected arguments {argv[1:]} (only --mode=beam takes pipeline options after --)"
        )
    try:
        sentences.language_code(FLAGS.language)
    except ValueError as e:
        raise cli.UserError(f"--language={FLAGS.language}: {e}") from None
    for name, reason in _SCALED_FLAGS.items():
        if FLAGS[name].value != FLAGS[name].default and FLAGS.mode == "reference":
            raise cli.UserError(f"--{name} is for --mode=scaled or beam; reference mode {reason}")
    # Flags that shape what another flag turns off would do nothing, silently.
    if FLAGS.eval_fraction == 0:
        for name in ("num_eval_shards", "eval_masked_lm_prob"):
            if FLAGS[name].present and FLAGS[name].value != FLAGS[name].default:
                raise cli.UserError(
                    f"--{name}={FLAGS[name].value} is for the eval split, and --eval_fraction=0 "
                    "holds out none: drop it, or pass --eval_fraction above 0"
                )
    if FLAGS.tfds_data_dir and not any(s.strip().startswith("tfds:") for s in FLAGS.input):
        raise cli.UserError(
            f"--tfds_data_dir={FLAGS.tfds_data_dir!r} is for TFDS inputs "
            "(--input=tfds:NAME:SPLIT), and no --input is one: drop it"
        )


def main(argv):
    _check_flags(argv)
    storage.check_paths(  # parsed once, before anything is read or written
        {f"--{name}": FLAGS[name].value for name in _PATH_FLAGS},
        outputs=[] if FLAGS.verify else ["--output_dir"],
    )
    if FLAGS.verify:
        problems = output.verify(FLAGS.output_dir)
        if problems:
            raise cli.UserError(
                f"--verify: FAILED, {len(problems)} problem(s) in {FLAGS.output_dir}: "
                + "; ".join(problems)
                + "; rerun the command that wrote it to rewrite what is damaged"
            )
        print(f"verify: OK, every shard in {FLAGS.output_dir} matches its manifest")
        return 0
    job.check_inputs_are_not_the_vocabulary(FLAGS.input, FLAGS.vocab_file)
    job_flags = _recorded_flags()
    try:
        if FLAGS.mode == "reference":
            tokenizer = job.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
            manifest = reference.run(
                FLAGS.input,
                tokenizer,
                options_from_flags(),
                dupe_factor=FLAGS.dupe_factor,
                seed=FLAGS.random_seed,
                output_dir=FLAGS.output_dir,
                fmt=FLAGS.format,
                flags=job_flags,
                text_field=FLAGS.text_field,
                tfds_data_dir=FLAGS.tfds_data_dir,
                vocab_file=FLAGS.vocab_file,
            )
        elif FLAGS.mode == "beam":
            try:
                from data_prep import beam_pipeline
            except ImportError as e:
                raise cli.UserError(
                    f"--mode=beam needs Apache Beam ({e}); pip install -e '.[beam]'"
                ) from None

            manifest = beam_pipeline.run(
                spec_from_flags(),
                FLAGS.vocab_file,
                FLAGS.do_lower_case,
                FLAGS.output_dir,
                pipeline_args=argv[1:],
                flags=job_flags,
            )
        else:
            from data_prep import scaled

            tokenizer = job.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
            masking.Vocab.from_tokenizer(tokenizer).check_whole_word(
                FLAGS.do_whole_word_mask and not FLAGS.dynamic_masking, "--vocab_file"
            )
            manifest = scaled.run(
                spec_from_flags(),
                tokenizer,
                FLAGS.output_dir,
                num_workers=FLAGS.num_workers,
                flags=job_flags,
                progress=FLAGS.progress,
                vocab_file=FLAGS.vocab_file,
            )
    except KeyboardInterrupt:
        cli.fail(cli.INTERRUPTED, 130)
    _summary(manifest)
    return 0


if __name__ == "__main__":
    cli.run(main, takes_args=True)  # --mode=beam: pipeline options after --
