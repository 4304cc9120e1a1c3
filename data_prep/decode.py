"""Prints training records as readable text: tokens (masked ones as [MASK]<label>), segments, NSP.

python -m data_prep.decode --input=records/train-00000-of-00001.tfrecord --vocab_file=vocab.txt
"""

import itertools
import sys

from absl import flags
from google.protobuf.message import DecodeError

from bert_jax import cli, storage
from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from bert_jax.text import tokenization
from data_prep import job

FLAGS = flags.FLAGS
flags.DEFINE_string("input", None, "A .tfrecord or .arrayrecord file (local, gs:// or s3://).")
flags.DEFINE_string("vocab_file", None, "The vocabulary the records were written with.")
flags.DEFINE_bool(
    "do_lower_case",
    tokenization.DO_LOWER_CASE,
    "As when the records were written (only matters for .model files).",
)
flags.DEFINE_integer("limit", 5, "Records to print; 0 prints all.")
flags.DEFINE_integer("skip", 0, "Records to skip first.")


def describe(features: dict, tokenizer) -> str:
    n = int(sum(features[F.INPUT_MASK]))
    tokens = tokenizer.convert_ids_to_tokens(features[F.INPUT_IDS][:n])
    segments = [int(s) for s in features[F.SEGMENT_IDS][:n]]
    lines = []
    if F.MASKED_LM_POSITIONS in features:
        weights = features[F.MASKED_LM_WEIGHTS]
        masked = [
            (int(p), int(i))
            for p, i, w in zip(features[F.MASKED_LM_POSITIONS], features[F.MASKED_LM_IDS], weights)
            if w > 0
        ]
        labels = dict(
            zip((p for p, _ in masked), tokenizer.convert_ids_to_tokens([i for _, i in masked]))
        )
        shown = [f"{t}<{labels[i]}>" if i in labels else t for i, t in enumerate(tokens)]
        lines.append("tokens:   " + " ".join(shown))
        lines.append("masked:   " + " ".join(f"{p}:{labels[p]}" for p, _ in masked))
    else:
        lines.append("tokens:   " + " ".join(tokens) + "   (unmasked record)")
    lines.append("segments: " + "".join(str(s) for s in segments))
    label = int(features[F.NEXT_SENTENCE_LABELS][0])
    lines.append(
        f"next_sentence_label: {label} ({'random B' if label else 'actual next'}); {n} tokens"
    )
    return "\n".join(lines)


def main(argv):
    del argv
    for name in ("input", "vocab_file"):
        if not FLAGS[name].value:
            raise cli.UserError(f"pass --{name}")
    if FLAGS.limit < 0 or FLAGS.skip < 0:
        raise cli.UserError("--limit and --skip must be 0 or more")
    storage.check_paths({"--input": FLAGS.input, "--vocab_file": FLAGS.vocab_file})
    why = storage.not_a_file(FLAGS.input) if storage.is_url(FLAGS.input) else None
    if why:
        raise cli.UserError(f"--input={FLAGS.input!r} {why}")
    tokenizer = job.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
    # A shard in a bucket is fetched whole into the local cache: ArrayRecord reads local files.
    local = storage.local_copy(FLAGS.input)
    # islice refuses a bound past sys.maxsize (absl's integers have none): no shard is that long
    start = min(FLAGS.skip, sys.maxsize)
    stop = min(FLAGS.skip + FLAGS.limit, sys.maxsize) if FLAGS.limit else None
    index = FLAGS.skip - 1
    with storage.reported_as(local, FLAGS.input):  # a damaged record names the user's file
        records = itertools.islice(record_io.read_records(local), start, stop)
        for index, data in enumerate(records, start=FLAGS.skip):
            try:
                features = F.decode_example(data)
            except (DecodeError, ValueError) as e:
                raise cli.UserError(
                    f"--input={FLAGS.input}: record {index} is not a tf.train.Example of BERT "
                    f"features ({e}); is it a file of pre-training records?"
                ) from None
            missing = F.missing_feature(features, masked=F.MASKED_LM_POSITIONS in features)
            if missing:
                raise cli.UserError(
                    f"--input={FLAGS.input}: record {index} has no {missing!r} feature (it has "
                    f"{sorted(features) or 'none of the BERT features'}): not a BERT pre-training "
                    "record"
                )
            unequal = F.unequal_lengths(features)
            if unequal:
                raise cli.UserError(f"--input={FLAGS.input}: record {index} holds {unequal}")
            _check_ids(features, tokenizer, index)
            print(f"--- record {index}")
            print(describe(features, tokenizer))
    if index < FLAGS.skip:  # nothing printed: say so rather than exit 0 in silence
        raise cli.UserError(
            f"--input={FLAGS.input} holds no records"
            + (f" after the first --skip={FLAGS.skip}" if FLAGS.skip else "")
        )
    return 0


def _check_ids(features: dict, tokenizer, index: int) -> None:
    """An id past the vocabulary: records and vocabulary do not belong together ([UNK]s hide it)."""
    top = max(
        int(max(features.get(name, []), default=0)) for name in (F.INPUT_IDS, F.MASKED_LM_IDS)
    )
    if top >= tokenizer.vocab_size:
        raise cli.UserError(
            f"--input={FLAGS.input}: record {index} holds token id {top} but --vocab_file="
            f"{FLAGS.vocab_file} has {tokenizer.vocab_size} entries; pass the vocabulary the "
            "records were written with"
        )


if __name__ == "__main__":
    cli.run(main)
