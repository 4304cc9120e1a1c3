r"""Tokenizer throughput: encode_batch (data prep's path), encode and tokenize.

  python -m bench.tokenizer_bench   # pydocs.txt and the odd-Unicode corpus, bert-base-uncased
  python -m bench.tokenizer_bench --vocab_file=tokenizer.json   # a Hugging Face tokenizer.json
  python -m bench.tokenizer_bench --hugging_face   # vocab.txt as a Hugging Face directory's

encode_batch is timed cold (a fresh tokenizer: every distinct word is a cache miss, as each data
prep worker starts) and warm (the same lines again: all hits), over the lines in batches of
--batch_lines as data prep hands them over; encode likewise, line by line; tokenize (the exact,
uncached path) on the first --tokenize_lines lines. Figures are MB of text per CPU second (process
time, which a shared machine disturbs less than wall time), the best of --repeats. To compare two
versions, run this from the root of each tree in one sitting: the tree you are in is timed.
"""

import functools
import os
import time

from absl import app, flags

from bert_jax.text import tokenization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(REPO, "data_prep", "testdata")

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "corpus",
    [
        os.path.join(REPO, "examples", "data", "pydocs.txt"),
        os.path.join(TESTDATA, "odd_unicode.txt"),
    ],
    "Text files to tokenize.",
)
flags.DEFINE_string(
    "vocab_file", os.path.join(TESTDATA, "bert-base-uncased-vocab.txt"), "Vocabulary."
)
flags.DEFINE_bool(
    "hugging_face",
    False,
    "Time the tokenizer a Hugging Face directory's vocab.txt gets (pretrained.HubWordPiece: "
    "transformers' rules) instead of make_tokenizer's.",
)
flags.DEFINE_integer("batch_lines", 4096, "Lines per encode_batch call.")
flags.DEFINE_integer("tokenize_lines", 5000, "Lines given to the uncached tokenize path.")
flags.DEFINE_integer("repeats", 3, "Runs per figure; the best is reported.")


def _best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _row(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    mb = sum(map(len, map(str.encode, lines))) / 1e6
    n = FLAGS.batch_lines
    batches = [lines[i : i + n] for i in range(0, len(lines), n)]
    sample = lines[: FLAGS.tokenize_lines]
    sample_mb = sum(map(len, map(str.encode, sample))) / 1e6

    def fresh():  # a cold cache; loading the vocabulary is not timed
        if FLAGS.hugging_face:
            from bert_jax.training import pretrained

            return pretrained.HubWordPiece(FLAGS.vocab_file, True, 100)
        return tokenization.make_tokenizer(FLAGS.vocab_file, do_lower_case=True)

    def batch(tok):
        for lines_ in batches:
            tok.encode_batch(lines_)

    def encode(tok):
        for line in lines:
            tok.encode(line)

    def best(fn):
        return min(fn() for _ in range(FLAGS.repeats))

    warm = fresh()
    batch(warm)
    encode(warm)
    figures = [
        mb / best(lambda: _cpu(functools.partial(batch, fresh()))),
        mb / best(lambda: _cpu(functools.partial(batch, warm))),
        mb / best(lambda: _cpu(functools.partial(encode, fresh()))),
        mb / best(lambda: _cpu(functools.partial(encode, warm))),
        sample_mb / best(lambda: _cpu(lambda: [warm.tokenize(line) for line in sample])),
    ]
    return f"{os.path.basename(path):24s} {mb:6.2f} " + " ".join(f"{x:11.2f}" for x in figures)


def main(argv):
    del argv
    print(f"{tokenization.__file__}; MB of text per CPU second, best of {FLAGS.repeats}")
    print(
        f"{'corpus':24s} {'MB':>6s} {'batch cold':>11s} {'batch warm':>11s} "
        f"{'encode cold':>11s} {'encode warm':>11s} {'tokenize':>11s}"
    )
    for path in FLAGS.corpus:
        print(_row(path))


if __name__ == "__main__":
    app.run(main)
