"""SQuAD's context pieces and answer spans against google-research/bert's run_squad.py, with a
character of every kind of code point in the context.

run_squad.py cuts a paragraph into words at " \\t\\r\\n" and U+202F, tokenizes each word with
FullTokenizer, and labels an answer by the pieces of the words its characters fall in, narrowed by
_improve_answer_span to the pieces that spell the tokenized answer when some do. bert_jax's
squad.tokenize_context keeps each piece's character span instead (tokenization's
basic_tokenize_with_offsets). The two must give the same piece ids, every piece must lie inside the
word run_squad.py maps it to, and an answer run_squad.py can spell exactly must get the same piece
span. The tokenizer is the plain-Python oracle of the original (tests/support/tokenizer_oracle.py).
"""

import random
import unicodedata

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.finetune import squad
from bert_jax.text import tokenization
from support import tokenizer_oracle as oracle
from support import unicode_sample

# Where a code point x sits: alone, at a word's start, inside, at its end, next to punctuation.
CONTEXT = "The {x}alpha be{x}ta gamma{x} {x} (delta{x}), epsilon.{x}"
ANSWERS = ("alpha", "be", "gamma", "delta", "epsilon", "The", "(delta")


def _kind(cp):
    ch = chr(cp)
    lower = ch.lower()
    return (
        unicodedata.category(ch),
        oracle.is_whitespace(ch),
        oracle.is_punctuation(ch),
        oracle.is_chinese_char(cp),
        ch in " \t\r\n\u202f",
        ch.isspace(),
        lower != ch,
        unicodedata.normalize("NFD", lower) != lower,
        unicodedata.combining(ch) > 0,
    )


def run_squad_mapping(context, full):
    """run_squad.py's read_squad_examples and convert_examples_to_features, for one paragraph:
    its words' character spans, the pieces, each piece's word and each word's first piece."""
    words, spans, prev_space = [], [], True
    for i, c in enumerate(context):
        if c in " \t\r\n" or ord(c) == 0x202F:
            prev_space = True
            continue
        if prev_space:
            words.append(c)
            spans.append([i, i + 1])
        else:
            words[-1] += c
            spans[-1][1] = i + 1
        prev_space = False
    pieces, piece_word, word_first = [], [], []
    for k, word in enumerate(words):
        word_first.append(len(pieces))
        for piece in full.tokenize(word):
            pieces.append(piece)
            piece_word.append(k)
    return spans, pieces, piece_word, word_first


def run_squad_label(answer, answer_start, spans, pieces, word_first, full):
    """The answer's (first, last) piece as run_squad.py trains on it, and whether
    _improve_answer_span found pieces that spell it exactly."""
    end_char = answer_start + len(answer) - 1
    # A character's word; a space's is the word before it (char_to_word_offset).
    first_word = max(k for k, (s, e) in enumerate(spans) if s <= answer_start)
    last_word = max(k for k, (s, e) in enumerate(spans) if s <= end_char)
    start = word_first[first_word]
    end = word_first[last_word + 1] - 1 if last_word + 1 < len(spans) else len(pieces) - 1
    target = " ".join(full.tokenize(answer))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(pieces[new_start : new_end + 1]) == target:
                return (new_start, new_end), True
    return (start, end), False


@pytest.fixture(scope="module")
def tokenizers(vocab_file):
    out = {}
    for lower in (True, False):
        vocab = oracle.load_vocab(vocab_file)
        out[lower] = (
            tokenization.WordPieceTokenizer(vocab_file, do_lower_case=lower),
            oracle.FullTokenizerOracle(vocab_file, do_lower_case=lower),
            vocab,
        )
    return out


@pytest.mark.parametrize("do_lower_case", [True, False], ids=["uncased", "cased"])
def test_pieces_and_answer_spans_match_run_squad_on_every_kind_of_code_point(
    tokenizers, do_lower_case
):
    tok, full, vocab = tokenizers[do_lower_case]
    problems, exact_labels = [], 0
    for cp in unicode_sample.sample(_kind):
        context = CONTEXT.format(x=chr(cp))
        spans, pieces, piece_word, word_first = run_squad_mapping(context, full)
        ours = squad.tokenize_context(tok, context)
        if ours.ids != [vocab[p] for p in pieces]:
            problems.append(f"U+{cp:04X}: piece ids differ")
            continue
        for i, (s, e) in enumerate(zip(ours.starts, ours.ends)):
            ws, we = spans[piece_word[i]]
            if not ws <= s < e <= we:
                problems.append(
                    f"U+{cp:04X}: piece {i} {pieces[i]!r} spans {s}:{e}, word {ws}:{we}"
                )
        for answer in ANSWERS:
            answer_start = context.index(answer)
            want, exact = run_squad_label(answer, answer_start, spans, pieces, word_first, full)
            got = squad._answer_pieces(ours, answer_start, answer_start + len(answer))
            if exact:
                exact_labels += 1
                if got != want:
                    problems.append(f"U+{cp:04X}: answer {answer!r} at pieces {got}, {want} there")
    assert not problems, f"{len(problems)} differences, e.g. " + "; ".join(problems[:10])
    assert exact_labels > 1000  # the comparison is not vacuous


def test_offsets_cover_each_token_character_by_character():
    """Private-use and unassigned characters are kept by the tokenizer (only Cc and Cf are
    dropped), so their spans are their own, not "the rest of the word"; a final sigma keeps its
    own span too."""
    text = "Caf\u00e9\u00ad\ue000x \u0378y \u200bz"
    tokens = tokenization.basic_tokenize_with_offsets(text, do_lower_case=True)
    assert [t for t, _ in tokens] == tokenization.basic_tokenize(text, True)
    assert tokens[0] == ("cafe\ue000x", [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (6, 7)])
    assert tokens[1] == ("\u0378y", [(8, 9), (9, 10)])
    assert tokens[2] == ("z", [(12, 13)])
    sigma = tokenization.basic_tokenize_with_offsets("ΟΔΟΣ x", do_lower_case=True)
    assert sigma == [("οδος", [(0, 1), (1, 2), (2, 3), (3, 4)]), ("x", [(5, 6)])]


def run_squad_keeps(context, answer, answer_start, spans):
    """run_squad.py's read_squad_examples test for a training answer: its cleaned text is found
    in the words that answer_start's first and last characters fall in (a space belongs to the
    word before it; a space before the first word to no word)."""
    end_char = answer_start + len(answer) - 1
    first = [k for k, (s, _) in enumerate(spans) if s <= answer_start]
    last = [k for k, (s, _) in enumerate(spans) if s <= end_char]
    if not first:
        return False
    actual = " ".join(context[s:e] for s, e in spans[first[-1] : last[-1] + 1])
    return actual.find(" ".join(answer.split())) != -1


def test_answers_a_character_or_two_off_their_offset_are_kept_as_run_squad_keeps_them(
    tokenizers,
):
    """SQuAD's answer_start is sometimes off by a character (onto the space before the answer,
    or into the word before); run_squad.py still trains on those questions, so must we, on the
    same pieces where run_squad.py spells the answer exactly."""
    tok, full, _ = tokenizers[True]
    rng = random.Random(0)
    words = ["the", "cat", "(sat)", "on", "mat,", "über", "x", "mañana", "dog's", "a-b"]
    kept = compared = 0
    problems = []
    for _ in range(300):
        context = rng.choice(["", " ", "  "]) + "".join(
            rng.choice(words) + rng.choice([" ", "  ", "\n", " \u202f"]) for _ in range(8)
        )
        spans, pieces, _, word_first = run_squad_mapping(context, full)
        ctx = squad.tokenize_context(tok, context)
        k = rng.randrange(len(spans))
        n = rng.randrange(1, 3)
        answer = context[spans[k][0] : spans[min(k + n, len(spans)) - 1][1]]
        answer = answer.strip("(),'") or answer
        true_start = context.index(answer, spans[k][0])
        start = max(0, true_start + rng.choice([-2, -1, 0, 1, 2]))
        if start + len(answer) > len(context):
            continue
        want = run_squad_keeps(context, answer, start, spans)
        chars = squad._answer_chars(context, answer, start)
        if want != (chars is not None):
            problems.append(f"{context!r} {answer!r}@{start}: run_squad keeps {want}")
            continue
        if not want:
            continue
        kept += 1
        label, exact = run_squad_label(answer, start, spans, pieces, word_first, full)
        if exact and chars[0] >= start:  # else run_squad may start in an earlier word
            compared += 1
            if squad._answer_pieces(ctx, *chars) != label:
                problems.append(f"{context!r} {answer!r}@{start}: pieces differ from {label}")
    assert not problems, f"{len(problems)} differences, e.g. " + "; ".join(problems[:5])
    assert kept > 100 and compared > 50
    off = squad.QAExample("q", "where?", "the cat sat", (("cat", 3),))  # onto the space
    arrays, _, _ = squad.encode_squad(tok, [off], 32, 8, 8, is_training=True)
    assert arrays[squad.START_POSITIONS].tolist() == [5]  # [CLS] where ? [SEP] the cat
    # An answer given as "" is no answer, labelled [CLS] as an impossible question is (its
    # offset inside "cat" labelled that word; elsewhere the question was dropped as unfound).
    empty = [squad.QAExample("q", "where?", "the cat sat", (("", at),)) for at in (5, -1)]
    arrays, _, _ = squad.encode_squad(tok, empty, 32, 8, 8, is_training=True)
    assert arrays[squad.START_POSITIONS].tolist() == arrays[squad.END_POSITIONS].tolist() == [0, 0]


def run_squad_best(windows, start_logits, end_logits, n_best_size, max_answer_length):
    """run_squad.py's write_predictions for one question: (doc first piece, doc last piece) of
    its best span, or None. _get_best_indexes ranks every position of the row; candidates are
    those in the window's context with the most context, end >= start, short enough."""
    best = None
    for w, window in enumerate(windows):
        s, e = start_logits[w], end_logits[w]

        def top(logits):
            ranked = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
            return [i for i, _ in ranked[:n_best_size]]

        for i in top(s):
            for j in top(e):
                inside = window.offset <= i and j < window.offset + window.length
                if not inside or j < i or j - i + 1 > max_answer_length:
                    continue
                if i < window.offset or not window.max_context[i - window.offset]:
                    continue
                score = s[i] + e[j]
                if best is None or score > best[0]:
                    doc = window.doc_start - window.offset
                    best = (score, i + doc, j + doc)
    return best and best[1:]


def test_best_answer_ranks_candidates_over_the_whole_row_as_run_squad_does(tokenizers):
    """n_best_size is the number of best positions of the whole input row (run_squad.py's
    _get_best_indexes, transformers' run_qa likewise), of which only those in the context are
    candidates: a question whose top positions are on the question or padding gets fewer."""
    tok = tokenizers[True][0]
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "x", "café", "1,000"]
    answered = 0
    for t in range(60):
        context = " ".join(rng.choice(words, size=int(rng.integers(3, 40))))
        ex = squad.QAExample(f"q{t}", "what is it here", context, ())
        arrays, windows, contexts = squad.encode_squad(tok, [ex], 24, 6, 8, is_training=False)
        start = rng.normal(size=arrays[F.INPUT_IDS].shape).astype(np.float32)
        end = rng.normal(size=start.shape).astype(np.float32)
        answers, _ = squad.best_answers(
            [ex], windows, contexts, start, end, n_best_size=4, max_answer_length=5
        )
        want = run_squad_best(windows, start, end, 4, 5)
        ctx = contexts[0]
        text = context[ctx.starts[want[0]] : ctx.ends[want[1]]] if want else ""
        assert answers[ex.qid] == text, (context, t)
        answered += want is not None
    assert answered > 30
