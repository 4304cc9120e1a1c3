"""Synthetic fine-tuning files of every format, and the tiny random BERT they train, saved as a
Hugging Face directory (the `tiny_hf` fixture of tests/conftest.py). Each task's label is learnable
from the text: sentiment from a keyword, a pair's label from which of its sentences holds a
keyword, a score from counting keywords, tags from word identity, the answer span from what the
word is. See tests/unit/bert_jax/finetune/train/test_synthetic.py for why initializer_range is
0.2."""

import json
import random

from flax import nnx

from bert_jax.hf import bert
from bert_jax.model import encoder
from configs.finetune import base
from support import tiny

FILLER = [f"w{i}" for i in range(40)]
POSITIVE, NEGATIVE = ["good", "great", "fine"], ["bad", "awful", "poor"]
PEOPLE, CITIES = ["alice", "bob", "carol", "dave"], ["paris", "rome", "oslo", "lima"]
SURNAMES = ["smith", "jones"]
COLORS = ["red", "blue", "green", "pink"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = (
    SPECIAL
    + FILLER
    + POSITIVE
    + NEGATIVE
    + PEOPLE
    + CITIES
    + SURNAMES
    + COLORS
    + ["not", "what", "color", "is", "it", "?", ".", "mr"]
)

TINY = dict(
    **tiny.SHAPE,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=64,
    type_vocab_size=2,
    initializer_range=0.2,
)


def save_tiny_hf(root) -> str:
    """A random tiny BERT as a Hugging Face directory (config.json, safetensors, vocab.txt)."""
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    config = encoder.BertConfig(vocab_size=len(VOCAB), **TINY)
    bert.save_hf(encoder.BertForPreTraining(config, rngs=nnx.Rngs(0)), str(vocab), str(root / "hf"))
    return str(root / "hf")


# --- Synthetic files -------------------------------------------------------------------------


def sst2_file(path, n, seed):
    """Sentiment from a keyword among filler words."""
    rng = random.Random(seed)
    lines = ["sentence\tlabel"]
    for _ in range(n):
        label = rng.randrange(2)
        words = rng.sample(FILLER, 5)
        words.insert(rng.randrange(6), rng.choice(POSITIVE if label else NEGATIVE))
        lines.append(f"{' '.join(words)}\t{label}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def stsb_file(path, n, seed):
    """Score = 1.25 x the number of positive keywords among four (two per sentence)."""
    rng = random.Random(seed)
    lines = [
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    ]
    for i in range(n):
        texts, positives = [], 0
        for _ in range(2):
            words = rng.sample(FILLER, 3)
            for _ in range(2):
                positive = rng.random() < 0.5
                positives += positive
                words.insert(
                    rng.randrange(len(words) + 1), rng.choice(POSITIVE if positive else NEGATIVE)
                )
            texts.append(" ".join(words))
        lines.append(f"{i}\tg\tf\ty\t{i}\ts\ts\t{texts[0]}\t{texts[1]}\t{1.25 * positives:.3f}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def mnli_file(path, n, seed):
    """The label says which sentence holds a keyword: only the first (contradiction), only the
    second (entailment) or both (neutral). The same words decide, so only the pair encoding
    (segments, order) tells the classes apart."""
    rng = random.Random(seed)
    header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
        "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
    )
    lines = [header]
    where = {"contradiction": (True, False), "entailment": (False, True), "neutral": (True, True)}
    for i in range(n):
        label = rng.choice(sorted(where))
        texts = []
        for has_keyword in where[label]:
            words = rng.sample(FILLER, 4)
            if has_keyword:
                words.insert(rng.randrange(5), rng.choice(POSITIVE + NEGATIVE))
            texts.append(" ".join(words))
        lines.append(
            f"{i}\tp\t{i}n\tg\t(a)\t(b)\t(A)\t(B)\t{texts[0]}\t{texts[1]}\t{label}\t{label}"
        )
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def conll_file(path, n, seed):
    """NER tags from word identity: a name (B-PER, a following surname I-PER), a city (B-LOC)."""
    rng = random.Random(seed)
    out = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(n):
        tokens = [(w, "O") for w in rng.sample(FILLER, 4)]
        entity = [(rng.choice(PEOPLE), "B-PER")]
        if rng.random() < 0.5:
            entity.append((rng.choice(SURNAMES), "I-PER"))
        at = rng.randrange(len(tokens) + 1)
        tokens[at:at] = entity
        at = rng.randrange(len(tokens) + 1)
        tokens.insert(at, (rng.choice(CITIES), "B-LOC"))
        out += [f"{w} NN O {t}" for w, t in tokens] + [""]
    path.write_text("\n".join(out) + "\n")
    return str(path)


def squad_file(path, n, seed, v2=False):
    """The answer is the color word in a context of filler words; in v2.0 a third of the
    contexts have no color (unanswerable)."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        words = rng.choices(FILLER, k=rng.randrange(8, 30))
        impossible = v2 and i % 3 == 0
        qa = {"id": f"q{i}", "question": "what color is it ?"}
        if impossible:
            qa.update(answers=[], is_impossible=True)
        else:
            at = rng.randrange(len(words) + 1)
            color = rng.choice(COLORS)
            words.insert(at, color)
            start = len(" ".join(words[:at])) + (1 if at else 0)
            qa["answers"] = [{"text": color, "answer_start": start}]
            if v2:
                qa["is_impossible"] = False
        paragraphs.append({"context": " ".join(words), "qas": [qa]})
    path.write_text(
        json.dumps(
            {
                "version": "v2.0" if v2 else "1.1",
                "data": [{"title": "synthetic", "paragraphs": paragraphs}],
            }
        )
    )
    return str(path)


def make_config(**data):
    config = base.get_config()
    config.data.update(data)
    config.data.max_seq_length = 32
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0
    config.optim.learning_rate = 1e-3
    config.train.batch_size = 16
    config.train.num_epochs = 5.0
    config.train.log_every_steps = 1000
    config.eval.at_start = True
    config.eval.batch_size = 32
    config.checkpoint.async_save = False
    config.export = False
    # Two data-parallel devices: the sharded path, at half the compile time of all eight.
    config.mesh.num_devices = 2
    return config
