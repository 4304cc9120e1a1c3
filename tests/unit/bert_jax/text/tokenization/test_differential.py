"""WordPieceTokenizer against the original FullTokenizer's rules on every Unicode code point.

The reference is tests/support/tokenizer_oracle.py, a transcription of google-research/bert's
tokenization.py (checked once against the real one; docs/data_prep.md, "Tokenizer parity"). Every
code point but the surrogates (UTF-8 input cannot hold them) is tried alone, inside a word
("ab{c}cd") and between words ("ab {c} cd"), cased and uncased, through all three of our code paths:
`tokenize` (the exact rules, uncached), `encode` (per-word cache, ASCII fast path) and
`encode_batch` (batched cache, ASCII fast path, Rust greedy WordPiece for pieces that are not whole
entries). Two vocabularies: the real bert-base-uncased one, and that one plus pieces made of odd
code points (whole words, "##" continuations, pieces that straddle "ab"/"cd"), so that the WordPiece
step has something to match for every kind of character.

Code points go through in blocks of BLOCK, one text a block (words separated by spaces, which no
rule of the original crosses) and, for encode_batch, one line a code point; a block that differs is
then tried code point by code point, so a failure names the code points, the context and the path.

Which code points: with BERT_JAX_EVERY_CODE_POINT=1 (`make test-unicode`), all 1,112,064 (250 s of
CPU: run it when the tokenizer changes). By default, every *kind* of code point: the code points
are cut into runs of neighbours that every rule of the original treats alike (Unicode category,
the original's control, whitespace, punctuation and CJK tests, whether lower-casing or NFD changes
them, whether they are combining, str.isspace, whether bert-base-uncased has them), and each run
is tried at both ends (where an off-by-one range or table would show) and every 127th code point
inside (tests/support/unicode_sample.py): about 20,000 code points, in well under a minute.
"""

import itertools
import os
import random
import unicodedata

import pytest

from bert_jax.text import tokenization
from support import tokenizer_oracle as oracle
from support import unicode_sample
from support.golden import TESTDATA

CONTEXTS = {"alone": "{}", "inside": "ab{}cd", "between": "ab {} cd"}
BLOCK = 1024
CODE_POINTS = unicode_sample.CODE_POINTS
MARK = "\uffff"  # a noncharacter word between code points in the oracle's input
PATHS = ("tokenize", "encode", "encode_batch")
SHOWN = 12  # differences spelled out in a failure message


def _alone(cp):
    """Code points that go through every path on their own, not in a block: Latin-1 (the ASCII
    fast paths), what str.split calls whitespace, and the noncharacters (MARK among them); a text
    holding some of these takes a different path as a whole, so in a block they would hide how the
    rest of the block is handled."""
    return cp < 0x100 or chr(cp).isspace() or 0xFDD0 <= cp <= 0xFDEF or cp & 0xFFFE == 0xFFFE


def _kind(cp, vocab_chars):
    """What any rule of the original (or a plausible reimplementation of it) may look at."""
    ch = chr(cp)
    lower = ch.lower()
    return (
        unicodedata.category(ch),
        oracle.is_control(ch),
        oracle.is_whitespace(ch),
        oracle.is_punctuation(ch),
        oracle.is_chinese_char(cp),
        lower != ch,
        unicodedata.normalize("NFD", ch) != ch,
        unicodedata.normalize("NFD", lower) != lower,
        unicodedata.combining(ch) > 0,
        ch.isspace(),
        ch in vocab_chars,
        _alone(cp),
    )


def _blocks(code_points):
    singles = [cp for cp in code_points if _alone(cp)]
    rest = [cp for cp in code_points if not _alone(cp)]
    return [[cp] for cp in singles] + [rest[i : i + BLOCK] for i in range(0, len(rest), BLOCK)]


def _can_be_a_vocab_entry(ch):
    # A vocab.txt line is stripped and cut at newlines: such characters cannot be in an entry.
    return not ch.isspace() and ch not in "\r\n"


def write_odd_vocab(base_vocab, path):
    """bert-base-uncased plus pieces made of sampled code points: whole words, "##" continuations
    and pieces that straddle "ab"/"cd", as written and as lower-casing and accent stripping leave
    them, so that the WordPiece step has something to match for every kind of character."""
    with open(base_vocab, encoding="utf-8") as f:
        entries = [line.rstrip("\n") for line in f]
    seen, rng = set(entries), random.Random(13)
    forms = ("{}", "##{}", "ab{}", "##{}cd", "##{}c", "{}{}")
    for cp in CODE_POINTS:
        ch = chr(cp)
        if rng.random() < 1 / 12 and _can_be_a_vocab_entry(ch):
            folded = oracle.strip_accents(ch.lower())
            for piece in {ch, folded} if all(map(_can_be_a_vocab_entry, folded)) else {ch}:
                entry = rng.choice(forms).format(piece, piece)
                if entry and entry not in seen:
                    seen.add(entry)
                    entries.append(entry)
    entries += [e for e in ("AB", "##CD", "##C", "Ab", "##Cd") if e not in seen]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(e + "\n" for e in entries))
    return str(path)


# Characters the fuzz texts draw from besides random code points: each rule's corner cases.
ODD = (
    " \t\n\r\x00\x01\x0b\x0c\x1c\x1f\x7f\x85\x9f\xa0\u1680\u2000\u2028\u2029\u3000"  # Zs, Cc
    "\u00ad\u200b\u200c\u200d\u200e\u2060\ufeff\U000e0001\ufffd\ufdd0\uffff\u0378"  # Cf, U+FFFD, Cn
    "\ue000\uf8ff\U000f0000\U0010fffd"  # private use
    "\u0301\u0308\u0327\u20dd\u0903\u093f"  # combining marks (Mn, Me, Mc)
    "ΣσςİıßẞﬁǅÅÉéñΑΩ"  # case mappings with context or more than one character
    "中文字\u3400\U00020000\uf900\u2f00한국어가ｶﾀＡＢ１！"  # CJK, Hangul (NFD grows), fullwidth
    "#$^`~_-.,!?¿¡«»“”‘’…—\u2010\u00b7\u0f0d\U0001f600\U0001f3fd"  # punctuation and symbols
)


def fuzz_texts(seed, count):
    """Random mixed strings: ASCII, the ODD characters, random code points, and long words that
    straddle the 200-character limit before or after NFD."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(0, 40)):
            roll = rng.random()
            if roll < 0.4:
                chars.append(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFXYZ0123456789 "))
            elif roll < 0.85:
                chars.append(rng.choice(ODD))
            else:
                cp = rng.randrange(0x110000)
                chars.append(chr(cp) if not 0xD800 <= cp <= 0xDFFF else "x")
        if rng.random() < 0.1:  # a long word: Hangul syllables decompose, accents are dropped
            long_word = rng.choices(["a", "é", "가", "ab", "İ"], k=rng.randint(90, 210))
            chars.insert(rng.randint(0, len(chars)), "".join(long_word)[: rng.randint(190, 210)])
        texts.append("".join(chars))
    return texts


@pytest.fixture(scope="module")
def code_points(vocab_file):
    """The code points to try: every kind of them (module docstring), or all of them."""
    with open(vocab_file, encoding="utf-8") as f:
        vocab_chars = set(f.read())
    return unicode_sample.sample(lambda cp: _kind(cp, vocab_chars))


@pytest.fixture(scope="module")
def vocab_files(vocab_file, tmp_path_factory):
    """{"real": bert-base-uncased, "odd": write_odd_vocab's}."""
    odd = tmp_path_factory.mktemp("vocab") / "odd-vocab.txt"
    return {"real": vocab_file, "odd": write_odd_vocab(vocab_file, odd)}


def _oracle_words(block, context, do_lower_case):
    """The original's basic tokens of context.format(chr(cp)), for each cp of the block."""
    if len(block) == 1:  # MARK itself among them
        return [oracle.basic_tokenize(context.format(chr(block[0])), do_lower_case)]
    text = f" {MARK} ".join(context.format(chr(cp)) for cp in block)
    words = oracle.basic_tokenize(text, do_lower_case) + [MARK]
    marks = list(itertools.compress(itertools.count(), map(MARK.__eq__, words)))
    assert len(marks) == len(block)
    return [words[start + 1 : end] for start, end in zip([-1, *marks], marks)]


class _Run:
    """Our tokenizer and the oracle on one vocabulary: expected ids and our three paths."""

    def __init__(self, name, path, do_lower_case, paths):
        self.name = name
        self.full = oracle.FullTokenizerOracle(path, do_lower_case)
        self.ours = tokenization.WordPieceTokenizer(path, do_lower_case=do_lower_case)
        self.memo = {}  # the oracle's WordPiece ids per basic token
        ours = self.ours
        every = {
            "tokenize": lambda text: ours.convert_tokens_to_ids(ours.tokenize(text)),
            "encode": ours.encode,
            "encode_batch": lambda lines: ours.encode_batch(lines)[0].tolist(),
        }
        self.paths = {path: every[path] for path in paths}

    def expected(self, words):
        ids = []
        for word in words:
            hit = self.memo.get(word)
            if hit is None:
                pieces = oracle.wordpiece_tokenize(word, self.full.vocab)
                hit = self.memo[word] = self.full.convert_tokens_to_ids(pieces)
            ids += hit
        return ids


def _check_block(run, label, context, block, expected, found):
    """Our three paths on one block (a text of its code points' contexts for tokenize and encode,
    a line per code point for encode_batch); a block that differs is replayed code point by code
    point. Returns whether the block matched."""
    lines = [context.format(chr(cp)) for cp in block]
    text = " ".join(lines)
    flat = list(itertools.chain.from_iterable(expected))
    matched = True
    for path, fn in run.paths.items():
        if fn(lines if path == "encode_batch" else text) == flat:
            continue
        matched = False
        for cp, line, want in zip(block, lines, expected):
            have = fn([line] if path == "encode_batch" else line)
            if have != want:
                found.append(
                    f"{run.name} vocab, {label}, {path}: U+{cp:04X} in {line!r}: "
                    f"original {want}, ours {have}"
                )
    return matched


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["uncased", "cased"])
def test_every_code_point_matches_the_original(vocab_files, code_points, do_lower_case):
    runs = [_Run("odd", vocab_files["odd"], do_lower_case, PATHS)]
    if do_lower_case:
        # The real vocabulary is uncased (cased, capitals would only give [UNK]); its run checks
        # data prep's path, the rules being those checked on the odd one.
        runs.append(_Run("real", vocab_files["real"], do_lower_case, ["encode_batch"]))
    found, differing = [], 0
    for block in _blocks(code_points):
        alone = _oracle_words(block, CONTEXTS["alone"], do_lower_case)
        inside = _oracle_words(block, CONTEXTS["inside"], do_lower_case)
        ab, cd = (oracle.basic_tokenize(w, do_lower_case) for w in ("ab", "cd"))
        for run in runs:
            words = {
                "alone": alone,
                "inside": inside,
                # No rule of the original looks across whitespace: "ab {c} cd" gives the words of
                # "ab", of c alone and of "cd".
                "between": [ab + w + cd for w in alone],
            }
            for label, context in CONTEXTS.items():
                expected = [run.expected(w) for w in words[label]]
                if not _check_block(run, label, context, block, expected, found):
                    differing += 1
                    if differing > 20:  # enough to see the pattern
                        break
    shown = "\n".join(found[:SHOWN])
    assert not found, f"{len(found)} difference(s), e.g.:\n{shown}"


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["uncased", "cased"])
def test_random_mixed_strings_match_the_original(vocab_files, do_lower_case):
    texts = fuzz_texts(seed=int(do_lower_case), count=1000)
    for name, path in vocab_files.items():
        full = oracle.FullTokenizerOracle(path, do_lower_case)
        ours = tokenization.WordPieceTokenizer(path, do_lower_case=do_lower_case)
        expected = [full.encode(text) for text in texts]
        for text, want in zip(texts, expected):
            assert ours.convert_tokens_to_ids(ours.tokenize(text)) == want, (name, text)
            assert ours.encode(text) == want, (name, text)  # the cache fills as it goes
        for start in range(0, len(texts), 500):  # batches with and without the odd lines
            ids, per_line = ours.encode_batch(texts[start : start + 500])
            batch = expected[start : start + 500]
            assert ids.tolist() == list(itertools.chain.from_iterable(batch)), name
            assert per_line.tolist() == [len(e) for e in batch], name


def test_long_runs_of_combining_marks_match_the_original_in_linear_time(vocab_files):
    """Lower-casing takes NFD, which CPython orders by insertion sort: a word of 160,000 combining
    marks held the tokenizer 37 s, an 8 MB line of them hours (the original too). Runs of marks
    of every combining class (and characters that decompose to marks only, U+0F73) long enough
    for the linear path give the original's tokens; one of 300,000 marks is read at once:
    under 10 s is room for a loaded machine (0.2 s here; 130 s before)."""
    import time

    marks = [chr(cp) for cp in range(0x300, 0x370)] + [
        "\u0f73", "\u0f75", "\u0344", "\u05b0", "\u0e38", "\u302e", "\U0001d165", "\U0001d16d",
        "\u1734", "\U00016ff0", "\u0bcd", "\u3099", "\U0001e944",
    ]  # fmt: skip
    other = list("aé\u1e17\uac00 x.\u4e00Ω")
    rng = random.Random(0)
    texts = [
        "".join(rng.choice(marks if rng.random() < 0.95 else other) for _ in range(600))
        for _ in range(40)
    ]
    full = oracle.FullTokenizerOracle(vocab_files["odd"], True)
    ours = tokenization.WordPieceTokenizer(vocab_files["odd"], do_lower_case=True)
    for text in texts:
        assert ours.encode(text) == full.encode(text), text
    hostile = "a" + "\u0301\u0316" * 150_000 + " x"
    start = time.perf_counter()
    assert ours.tokenize(hostile) == ["a", "x"]
    assert time.perf_counter() - start < 10


def test_the_default_selection_holds_every_range_end(code_points):
    """The sampled run still tries the ends of the ranges the original's rules name (CJK blocks,
    private use, the ASCII punctuation ranges) and the last code point."""
    chosen = set(code_points)
    ends = (0x21, 0x2F, 0x3A, 0x40, 0x5B, 0x60, 0x7B, 0x7E, 0x3400, 0x4DBF, 0x4E00, 0x9FFF)
    ends += (0xE000, 0xF8FF, 0xF900, 0xFAFF, 0x20000, 0x2A6DF, 0x2F800, 0x2FA1F, 0x10FFFF)
    assert not [hex(cp) for cp in ends if cp not in chosen]
    assert 15_000 < len(chosen) < 60_000 or len(chosen) == len(CODE_POINTS)


# --- Checking the oracle against the original (by hand, with TensorFlow) ---------------------


def verify_against_original(bert_dir, work_dir, every=1):
    """Runs the real tokenization.py (google-research/bert, in bert_dir) and this oracle on the
    differential test's inputs and prints what differs: every code point but the surrogates in
    three contexts, cased and uncased, through BasicTokenizer; every distinct word that gives
    through WordpieceTokenizer with both of the test's vocabularies; its random mixed strings
    through FullTokenizer; and load_vocab on both vocabularies and on one with odd line ends.
    Needs TensorFlow (its tf.compat.v1 API stands in for the TF1 the original imports). every=N
    takes every Nth code point only (a quick look)."""
    import sys

    import tensorflow.compat.v1

    sys.modules["tensorflow"] = tensorflow.compat.v1
    code_points = CODE_POINTS[::every]
    sys.path.insert(0, bert_dir)
    import tokenization as original

    odd_lines = os.path.join(work_dir, "odd-lines-vocab.txt")
    with open(odd_lines, "wb") as f:
        f.write("[UNK]\n[CLS]\r\na\rb\nc\x85d\ne\u2028f\n g\x0bh \n\n\u3000x\u3000\nlast".encode())
    vocabs = {
        "real": os.path.join(os.path.join(TESTDATA, "bert-base-uncased-vocab.txt")),
    }
    vocabs["odd"] = write_odd_vocab(vocabs["real"], os.path.join(work_dir, "odd-vocab.txt"))
    for name, path in [*vocabs.items(), ("odd line ends", odd_lines)]:
        same = dict(original.load_vocab(path)) == oracle.load_vocab(path)
        print(f"load_vocab, {name}: {'same' if same else 'DIFFERENT'}")
    for do_lower_case in (True, False):
        basic = original.BasicTokenizer(do_lower_case=do_lower_case)
        words, compared, differing = set(), 0, []
        for context in CONTEXTS.values():
            for block in _blocks(code_points):
                text = " ".join(context.format(chr(cp)) for cp in block)
                theirs, ours = basic.tokenize(text), oracle.basic_tokenize(text, do_lower_case)
                compared += len(block)
                words.update(theirs)
                if theirs != ours:
                    differing += [
                        hex(cp)
                        for cp in block
                        if basic.tokenize(context.format(chr(cp)))
                        != oracle.basic_tokenize(context.format(chr(cp)), do_lower_case)
                    ]
        print(
            f"BasicTokenizer, do_lower_case={do_lower_case}: {compared} code-point texts, "
            f"{len(differing)} differ {differing[:20]}"
        )
        for name, path in vocabs.items():
            vocab = original.load_vocab(path)
            wordpiece = original.WordpieceTokenizer(vocab=vocab)
            bad = [w for w in words if wordpiece.tokenize(w) != oracle.wordpiece_tokenize(w, vocab)]
            texts = fuzz_texts(seed=int(do_lower_case), count=3000)
            full = original.FullTokenizer(path, do_lower_case=do_lower_case)
            mine = oracle.FullTokenizerOracle(path, do_lower_case)
            fuzz = [t for t in texts if full.tokenize(t) != mine.tokenize(t)]
            print(
                f"  {name} vocab: WordpieceTokenizer on {len(words)} distinct words, "
                f"{len(bad)} differ {bad[:5]!r}; FullTokenizer on {len(texts)} random "
                f"strings, {len(fuzz)} differ {fuzz[:3]!r}"
            )


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=verify_against_original.__doc__)
    parser.add_argument("bert_dir", help="a checkout of google-research/bert")
    parser.add_argument("--every", type=int, default=1, help="every Nth code point only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        verify_against_original(args.bert_dir, work, args.every)
