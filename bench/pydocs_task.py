"""A real labelled text-classification task built from the Python documentation corpus.

    python -m bench.pydocs_task --out_dir=/tmp/pydocs_task

Each sentence of examples/data/pydocs.txt (the Python 3.11 documentation, 438 pages, one
sentence per line, a blank line between pages) is labelled with the part of the documentation
its page comes from: the C API reference, extending/embedding, the FAQ, the HOWTOs, the library
reference, the language reference, the tutorial, or What's New. Pages appear in the corpus in the
order of the documentation's source tree, so each part is a run of page numbers (SECTIONS, found
by reading the pages' first lines; the md5 pins the corpus they hold for).

Sentences of at least 6 words are kept, each once; a page's title-like lines are too short to
count. Per class, 500 sentences go to train.tsv and 125 to dev.tsv (4000 / 1000), drawn with a
fixed seed: rerunning gives the same files. The files have the GLUE SST-2 header
(`sentence<TAB>label`), so `--config=configs/finetune/sst2.py --config.data.labels=...` reads
them (bench/finetune_bench.py does).
"""

import hashlib
import os
import random

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO, "examples", "data", "pydocs.txt")
CORPUS_MD5 = "9d28b87efb3d512d1b73b85645df53b1"
# class -> (first, last) page, 1-based, of pydocs.txt
SECTIONS = {
    "c-api": (3, 38),  # "The functions in this chapter interact with Python objects ..."
    "extending": (53, 58),  # "Embedding Python in Another Application" ... "... on Windows"
    "faq": (59, 66),  # "Design and History FAQ" ... "Python on Windows FAQ"
    "howto": (67, 86),  # "Accessing The Annotations Dict ..." ... "HOWTO Fetch Internet ..."
    "library": (89, 382),  # "2to3 --- ..." ... "zoneinfo --- IANA time zone support"
    "reference": (384, 393),  # "Compound statements ..." ... "A simple statement ..."
    "tutorial": (394, 411),  # "The Python interpreter can get its input ..." ... "Reading ..."
    "whatsnew": (418, 438),  # "What's New in Python 2.0" ... "What's New in Python"
}
LABELS = tuple(SECTIONS)
TRAIN_PER_CLASS, DEV_PER_CLASS, MIN_WORDS, SEED = 500, 125, 6, 0

flags.DEFINE_string("out_dir", "/tmp/pydocs_task", "Where train.tsv and dev.tsv go.")


def pages(path: str = CORPUS) -> list[list[str]]:
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.md5(data).hexdigest() != CORPUS_MD5:
        raise ValueError(f"{path} is not the pydocs corpus SECTIONS was read from (md5 differs)")
    return [p.split("\n") for p in data.decode("utf-8").split("\n\n") if p.strip()]


def build(out_dir: str) -> dict[str, int]:
    """Writes train.tsv and dev.tsv; returns the row counts."""
    docs = pages()
    rng = random.Random(SEED)
    train, dev, seen = [], [], set()
    for label, (first, last) in SECTIONS.items():
        sentences = []
        for page in docs[first - 1 : last]:
            for line in page:
                line = line.replace("\t", " ").strip()
                if len(line.split()) >= MIN_WORDS and line not in seen:
                    seen.add(line)
                    sentences.append(line)
        picked = rng.sample(sentences, TRAIN_PER_CLASS + DEV_PER_CLASS)
        train += [(s, label) for s in picked[:TRAIN_PER_CLASS]]
        dev += [(s, label) for s in picked[TRAIN_PER_CLASS:]]
    rng.shuffle(train)
    rng.shuffle(dev)
    os.makedirs(out_dir, exist_ok=True)
    for name, rows in (("train.tsv", train), ("dev.tsv", dev)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{s}\t{label}\n" for s, label in rows)
    return {"train": len(train), "dev": len(dev)}


def main(argv):
    del argv
    counts = build(flags.FLAGS.out_dir)
    print(f"wrote {counts['train']} train and {counts['dev']} dev sentences, {len(LABELS)} classes")
    print(f"labels: {','.join(LABELS)}")


if __name__ == "__main__":
    app.run(main)
