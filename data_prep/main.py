r"""Raw text -> masked MLM/NSP training records.

  python -m data_prep.main --input=data_prep/testdata/sample_text.txt \
      --vocab_file=data_prep/testdata/bert-base-uncased-vocab.txt --output_dir=/tmp/records

Flag names follow google-research/bert's create_pretraining_data.py where the meaning is the same.
--mode=reference reproduces that generator record for record (same input, vocabulary, seed, flags).
"""
import logging
import sys

from absl import app, flags

from bert_jax import record_io
from bert_jax import tokenization
from data_prep import instances, pipeline, readers

FLAGS = flags.FLAGS
flags.DEFINE_list("input", None, "Input files, globs (plain or .gz; .jsonl for JSON lines) or tfds:NAME[:SPLIT].")
flags.DEFINE_string("output_dir", None, "Directory for the record shards and manifest.json.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt, or a SentencePiece .model file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_bool("do_whole_word_mask", False, "Mask all pieces of a word together.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, [CLS]/[SEP] included.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked positions per instance.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Fraction of tokens to mask.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter-than-maximum instance.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the corpus, each with different masks.")
flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice.")
flags.DEFINE_enum("format", record_io.ARRAYRECORD, record_io.FORMATS, "Record file format.")
flags.DEFINE_enum("mode", "reference", ["reference"], "reference: the original generator's exact output.")
flags.DEFINE_bool("nsp", True, "Next-sentence-prediction pairs; false gives MLM-only full-length segments.")
flags.DEFINE_bool("dynamic_masking", False, "Write unmasked records; the trainer masks on the fly.")
flags.DEFINE_string("text_field", "text", "Text field of JSONL records and TFDS examples.")
flags.DEFINE_string("tfds_data_dir", None, "data_dir of TFDS datasets.")


def options_from_flags() -> instances.InstanceOptions:
    return instances.InstanceOptions(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        nsp=FLAGS.nsp,
        mask=not FLAGS.dynamic_masking,
    )


def main(argv):
    del argv
    logging.getLogger().setLevel(logging.INFO)
    try:
        tokenizer = tokenization.make_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
        opts = options_from_flags()
        job_flags = {name: FLAGS[name].value for name in (
            "input", "vocab_file", "do_lower_case", "do_whole_word_mask", "max_seq_length",
            "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor", "random_seed",
            "format", "mode", "nsp", "dynamic_masking", "text_field")}
        manifest = pipeline.run_reference(
            FLAGS.input, tokenizer, opts, dupe_factor=FLAGS.dupe_factor, seed=FLAGS.random_seed,
            output_dir=FLAGS.output_dir, fmt=FLAGS.format, flags=job_flags, text_field=FLAGS.text_field,
            tfds_data_dir=FLAGS.tfds_data_dir)
    except (tokenization.VocabError, readers.InputError, pipeline.OutputError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stats, read = manifest["stats"], manifest["read"]
    print(f"wrote {stats['instances']} instances from {manifest['documents']} documents "
          f"to {FLAGS.output_dir} in {manifest['seconds']:.1f}s; "
          f"{stats['mean_tokens_per_instance']:.1f} tokens/instance, mask rate {stats['mask_rate']:.3f}, "
          f"random next {stats['random_next_fraction']:.3f}")
    skipped = {k: v for k, v in read.items() if k.startswith(("bad_", "empty_")) and v}
    if skipped:
        print(f"skipped or repaired: {skipped}")
    return 0


if __name__ == "__main__":
    flags.mark_flags_as_required(["input", "output_dir", "vocab_file"])
    app.run(main)
