r"""Sentence segmenters compared: boundary accuracy on a hand-labelled set, and MB/s.

  python -m bench.sentence_bench

The labelled set is data_prep/testdata/sentences_labelled.txt (one sentence per line, a blank line
between paragraphs; ~300 sentences with the usual traps: abbreviations, initials, decimals, quotes,
ellipses, lists, URLs). Each paragraph is given to a segmenter as its sentences joined by one
space; a boundary is the offset where a sentence starts (the first excluded). Precision is the
share of boundaries found that are true, recall the share of true ones found; "paragraphs exact"
is the share of paragraphs cut exactly right. Speed is measured on prose: the sentences of
examples/data/pydocs.txt joined into paragraphs (--speed_mb of it), in CPU seconds (steadier than
wall time on a shared machine), best of --speed_repeats, one core.
Candidates the venv lacks are reported as missing.
"""

import os
import re
import time

from absl import app, flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABELLED = os.path.join(REPO, "data_prep", "testdata", "sentences_labelled.txt")

FLAGS = flags.FLAGS
flags.DEFINE_string("speed_corpus", os.path.join(REPO, "examples", "data", "pydocs.txt"), "Prose.")
flags.DEFINE_float("speed_mb", 0.3, "MB of the speed corpus to segment.")
flags.DEFINE_integer("speed_repeats", 3, "Speed runs per segmenter; the best is reported.")


def labelled_paragraphs(path: str = LABELLED) -> list[list[str]]:
    """The labelled set: paragraphs, each a list of sentences."""
    paragraphs, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# "):
                continue
            line = line.strip()
            if line:
                current.append(line)
            elif current:
                paragraphs.append(current)
                current = []
    if current:
        paragraphs.append(current)
    return paragraphs


# The splitter data_prep used before a library replaced it, kept here as the baseline.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_ABBREVIATIONS = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|No|Fig|Vol|Inc|Ltd|Co)\.$"
)


def regex_sentences(text: str) -> list[str]:
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        candidate = text[start : match.start()].strip()
        if _ABBREVIATIONS.search(candidate) or re.search(r"\b[A-Z]\.$", candidate):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    return [*sentences, text[start:].strip()]


def _candidates() -> dict:
    """name -> (function text -> sentences) or the reason it is missing."""
    found = {}
    found["regex (before)"] = regex_sentences
    from data_prep import sentences

    found["sentencex + lower-case merge (chosen: data_prep.sentences)"] = sentences.split_sentences
    try:
        import pysbd

        segmenter = pysbd.Segmenter(language="en", clean=False)
        found["pysbd 0.3.4"] = segmenter.segment
    except ImportError as e:
        found["pysbd"] = str(e)
    try:
        import sentencex

        found["sentencex 1.0"] = lambda text: list(sentencex.segment("en", text))
    except ImportError as e:
        found["sentencex"] = str(e)
    try:
        import blingfire

        found["blingfire 0.1.8"] = lambda text: blingfire.text_to_sentences(text).split("\n")
    except ImportError as e:
        found["blingfire"] = str(e)
    try:
        from syntok import segmenter as syntok_segmenter

        def syntok_split(text):
            return [
                "".join(token.spacing + token.value for token in sentence).strip()
                for paragraph in syntok_segmenter.analyze(text)
                for sentence in paragraph
            ]

        found["syntok 1.4.4"] = syntok_split
    except ImportError as e:
        found["syntok"] = str(e)
    return found


def boundaries(text: str, sentences: list[str]) -> set[int]:
    """Offsets in text where each sentence but the first starts (sentences located in order)."""
    starts, position = [], 0
    for sentence in sentences:
        sentence = sentence.strip()
        if not sentence:
            continue
        at = text.find(sentence[:20], position)
        if at < 0:  # a segmenter that changed the text: fall back to the running position
            at = position
        starts.append(at)
        position = at + len(sentence)
    return set(starts[1:])


def score(split, paragraphs) -> dict:
    true_positive = found = expected = exact = 0
    for sentences in paragraphs:
        text = " ".join(sentences)
        truth = boundaries(text, sentences)
        got = boundaries(text, split(text))
        true_positive += len(truth & got)
        found += len(got)
        expected += len(truth)
        exact += truth == got
    precision = true_positive / max(found, 1)
    recall = true_positive / max(expected, 1)
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / max(precision + recall, 1e-9),
        "exact": exact / len(paragraphs),
    }


def speed_paragraphs(path: str, megabytes: float) -> list[str]:
    """Paragraphs of about 5 sentences each from a BERT-format corpus, up to `megabytes`."""
    paragraphs, current, size = [], [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line:
                current.append(line)
            if current and (not line or len(current) == 5):
                paragraphs.append(" ".join(current))
                size += len(paragraphs[-1].encode()) + 1
                current = []
                if size >= megabytes * 1e6:
                    break
    return paragraphs


def mb_per_s(split, paragraphs, repeats) -> float:
    size = sum(len(p.encode()) + 1 for p in paragraphs)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for paragraph in paragraphs:
            split(paragraph)
        best = min(best, time.process_time() - start)
    return size / best / 1e6


def main(argv):
    del argv
    paragraphs = labelled_paragraphs()
    prose = speed_paragraphs(FLAGS.speed_corpus, FLAGS.speed_mb)
    print(
        f"labelled set: {sum(map(len, paragraphs))} sentences in {len(paragraphs)} paragraphs; "
        f"speed on {sum(len(p.encode()) for p in prose) / 1e6:.2f} MB of "
        f"{os.path.basename(FLAGS.speed_corpus)}"
    )
    print("| segmenter | precision | recall | F1 | paragraphs exact | MB/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, split in _candidates().items():
        if isinstance(split, str):
            print(f"| {name} | missing: {split} | | | | |")
            continue
        s = score(split, paragraphs)
        speed = mb_per_s(split, prose, FLAGS.speed_repeats)
        print(
            f"| {name} | {s['precision']:.3f} | {s['recall']:.3f} | {s['f1']:.3f} | "
            f"{s['exact']:.3f} | {speed:.2f} |"
        )


if __name__ == "__main__":
    app.run(main)
