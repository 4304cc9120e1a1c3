r"""Prints training records as readable text: tokens (masked ones as [MASK]<label>), segments, NSP
label.

  python -m data_prep.decode --input=/tmp/records/train-00000-of-00001.arrayrecord \
      --vocab_file=data_prep/testdata/bert-base-uncased-vocab.txt --limit=3
"""

import itertools
import sys

from absl import app, flags

from bert_jax import features as F
from bert_jax import record_io, tokenization
from data_prep import records

FLAGS = flags.FLAGS
flags.DEFINE_string("input", None, "A .tfrecord or .arrayrecord file.")
flags.DEFINE_string("vocab_file", None, "The vocabulary the records were written with.")
flags.DEFINE_bool(
    "do_lower_case", True, "As when the records were written (only matters for .model files)."
)
flags.DEFINE_integer("limit", 5, "Records to print; 0 prints all.")
flags.DEFINE_integer("skip", 0, "Records to skip first.")


def main(argv):
    del argv
    try:
        tokenizer = tokenization.make_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
        stream = record_io.read_records(FLAGS.input)
        stop = FLAGS.skip + FLAGS.limit if FLAGS.limit else None
        for index, data in enumerate(itertools.islice(stream, FLAGS.skip, stop), start=FLAGS.skip):
            print(f"--- record {index}")
            print(records.describe(F.decode_example(data), tokenizer))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    flags.mark_flags_as_required(["input", "vocab_file"])
    app.run(main)
