"""SQuAD v1.1/v2.0 JSON -> windowed model inputs, and span logits -> answer texts, as
run_squad.py does, but each word piece keeps its context characters: answers map back to the
context as written. docs/finetuning.md, "Extractive question answering: SQuAD v1.1 and v2.0".
"""

import collections
import dataclasses
import json
import os
import re
from collections.abc import Sequence

import numpy as np

from bert_jax import cli, storage
from bert_jax.data.contract import features as F
from bert_jax.finetune.encode import INPUTS, FormatError, pack
from bert_jax.text import tokenization

START_POSITIONS = "start_positions"  # int32 [windows]: answer's first piece (0: no answer here)
END_POSITIONS = "end_positions"  # int32 [windows]: answer's last piece


@dataclasses.dataclass(frozen=True)
class QAExample:
    qid: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character offset in context); () if none given
    is_impossible: bool = False


@dataclasses.dataclass
class ContextPieces:
    """Word-piece ids of a context and the [start, end) character span each came from."""

    ids: list[int]
    starts: list[int]
    ends: list[int]


@dataclasses.dataclass(frozen=True)
class Window:
    """Where a window's context pieces sit in its input, for mapping logits back to text."""

    example_index: int
    offset: int  # input position of the window's first context piece
    doc_start: int  # index of that piece in ContextPieces
    length: int  # context pieces in the window
    max_context: np.ndarray  # bool [length]: this window gives the piece its most context


def read_squad(path: str) -> list[QAExample]:
    """All questions of a SQuAD v1.1 or v2.0 file (answers optional, for test files)."""
    storage.check_file(path, "data file")
    with storage.open_read(path, "r", encoding="utf-8-sig") as f:  # -sig: a BOM is no text
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise FormatError(f"{path} is not JSON ({e}); expected a SQuAD file") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise FormatError(f"{path}: expected a SQuAD object {{'data': [{{'paragraphs': ...}}]}}")
    out = []
    for a, article in enumerate(doc["data"]):
        title = article.get("title", a) if isinstance(article, dict) else a
        # Each level's type is checked: a null where text belongs is named here, not a TypeError.
        for p, paragraph in enumerate(_field(article, "paragraphs", list, path, title, "?", ())):
            at = (path, title, p)  # where _field's errors point
            context = _field(paragraph, "context", str, *at)
            for qa in _field(paragraph, "qas", list, *at):
                try:
                    answers = tuple(
                        (_field(x, "text", str, *at), int(x["answer_start"]))
                        for x in _field(qa, "answers", (list, type(None)), *at, ()) or ()
                    )
                    qid, question = str(qa["id"]), _field(qa, "question", str, *at)
                    # A string "false" would be true: only JSON booleans (or 0/1).
                    impossible = bool(_field(qa, "is_impossible", (bool, int), *at, False))
                    out.append(QAExample(qid, question, context, answers, impossible))
                except FormatError:
                    raise
                except (KeyError, TypeError, ValueError) as e:
                    raise FormatError(
                        f"{path}: article {title!r} paragraph {p}: missing or bad field {e}; "
                        f"{_FIELDS}"
                    ) from None
    # Answers are keyed by id (as in the official scripts): a repeated id drops questions.
    counts = collections.Counter(ex.qid for ex in out)
    repeated = [qid for qid, n in counts.items() if n > 1]
    if repeated:
        raise FormatError(
            f"{path}: question id {repeated[0]!r} appears {counts[repeated[0]]} times "
            f"({len(repeated)} ids repeated); ids must be unique (predictions are keyed by id)"
        )
    if not out:
        raise FormatError(f"{path} holds no questions")
    return out


_FIELDS = "SQuAD needs context, qas[id, question, answers[text, answer_start]]"
_MISSING = object()


def _field(obj, key: str, kind, path: str, title, p, default=_MISSING):
    """obj[key], which must be a `kind` (`default` where it is absent, if given)."""
    if isinstance(obj, dict) and key not in obj and default is not _MISSING:
        return default
    value = obj.get(key, _MISSING) if isinstance(obj, dict) else _MISSING
    if value is _MISSING or not isinstance(value, kind):
        wanted = (kind if isinstance(kind, type) else kind[0]).__name__
        got = (
            f"a {type(value).__name__}, not a {wanted}"
            if value is not _MISSING
            else "missing" + ("" if isinstance(obj, dict) else f" (in a {type(obj).__name__})")
        )
        where = f"article {title!r}" + (f" paragraph {p}" if p != "?" else "")
        raise FormatError(f"{path}: {where}: missing or bad field {key!r}: {got}; {_FIELDS}")
    return value


def tokenize_context(tok, context: str) -> ContextPieces:
    """Context -> word pieces with character spans (the ids of tokenizing word by word)."""
    if not isinstance(tok, tokenization.WordPieceTokenizer):
        raise cli.UserError(
            "span extraction needs BERT's WordPiece rules (run_squad.py's word-by-word "
            f"offsets); this model's tokenizer is a {type(tok).__name__} (SentencePiece, or a "
            "tokenizer.json whose normalizer, pre-tokenizer or added tokens BERT's rules do not "
            "give): not supported for SQuAD"
        )
    pieces = ContextPieces([], [], [])
    # Words as run_squad.py cuts a paragraph (doc_tokens): at " \t\r\n" and U+202F only.
    for match in re.finditer(r"[^ \t\r\n\u202f]+", context):
        w0 = match.start()
        for basic, spans in tokenization.basic_tokenize_with_offsets(
            match.group(), tok.do_lower_case
        ):
            ids = tok.encode(basic)
            off = 0
            for i, piece in zip(ids, tok.convert_ids_to_tokens(ids)):
                if piece == tokenization.UNK:  # the whole basic token
                    lo, hi = 0, len(basic)
                else:
                    lo, hi = off, off + len(piece[2:] if piece.startswith("##") else piece)
                    off = hi
                pieces.ids.append(i)
                pieces.starts.append(w0 + spans[lo][0])
                pieces.ends.append(w0 + spans[hi - 1][1])
    return pieces


def _answer_pieces(ctx: ContextPieces, char_start: int, char_end: int) -> tuple[int, int] | None:
    """First and last piece overlapping the characters [char_start, char_end)."""
    inside = [
        i for i, (s, e) in enumerate(zip(ctx.starts, ctx.ends)) if s < char_end and e > char_start
    ]
    return (inside[0], inside[-1]) if inside else None


def _answer_chars(context: str, text: str, start: int) -> tuple[int, int] | None:
    """The [start, end) characters of a training answer: at answer_start, else its first place in
    the words there (offsets a character or two off), else None (run_squad.py drops it)."""
    end = start + len(text)
    if " ".join(context[start:end].split()) == " ".join(text.split()):
        return start, end
    if not text.split() or not 0 <= start < end <= len(context):
        return None
    # Words as run_squad.py cuts them; a space belongs to the word before it.
    words = [m.span() for m in re.finditer(r"[^ \t\r\n\u202f]+", context)]
    first = [k for k, (s, _) in enumerate(words) if s <= start]
    last = [k for k, (s, _) in enumerate(words) if s <= end - 1]
    if not first:
        return None  # whitespace before the first word: run_squad.py finds no text there
    chars = []  # context index of each character of the words joined by single spaces
    for s, e in words[first[-1] : last[-1] + 1]:
        chars.extend([*range(s, e), -1])
    joined = " ".join(context[s:e] for s, e in words[first[-1] : last[-1] + 1])
    at = joined.find(" ".join(text.split()))
    if at < 0:
        return None
    return chars[at], chars[at + len(" ".join(text.split())) - 1] + 1


def _max_context(spans: list[tuple[int, int]], span_index: int, position: int) -> bool:
    """run_squad.py's rule: a piece belongs to the window where min(left, right context) + 0.01 *
    window length is largest."""
    # Only the neighbouring windows can hold `position`: a long context stays linear.
    lo, hi = span_index, span_index + 1
    while lo > 0 and sum(spans[lo - 1]) > position:
        lo -= 1
    while hi < len(spans) and spans[hi][0] <= position:
        hi += 1
    best, best_index = None, None
    for i, (start, length) in enumerate(spans[lo:hi], start=lo):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, i
    return best_index == span_index


def length_problems(max_seq_length: int, doc_stride: int, max_query_length: int) -> list[str]:
    """What is wrong with a window's lengths (runs.check_finetuning asks before the run starts)."""
    problems = []
    # The pair rule (features.min_seq_length) with the question taking max_query_length pieces.
    if max_seq_length < F.min_seq_length(2) + max_query_length - 1:
        problems.append(
            f"max_seq_length={max_seq_length} must exceed max_query_length="
            f"{max_query_length} + 3 special tokens"
        )
    if doc_stride < 1:
        problems.append(f"doc_stride must be positive, got {doc_stride}")
    return problems


def encode_squad(
    tok,
    examples: Sequence[QAExample],
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
) -> tuple[dict[str, np.ndarray], list[Window], list[ContextPieces]]:
    """Examples -> (input arrays over all windows, per-window Window, per-example ContextPieces);
    with `is_training`, answers become labels (unfindable ones dropped, as run_squad.py does)."""
    problems = length_problems(max_seq_length, doc_stride, max_query_length)
    if problems:
        raise cli.UserError("; ".join(problems))
    rows: dict[str, list] = {k: [] for k in (*INPUTS, START_POSITIONS, END_POSITIONS)}
    windows: list[Window] = []
    contexts: list[ContextPieces] = []
    skipped = 0
    cache: dict[str, ContextPieces] = {}  # a paragraph's questions share one context
    for ex_i, ex in enumerate(examples):
        ctx = cache.get(ex.context)
        if ctx is None:
            ctx = cache[ex.context] = tokenize_context(tok, ex.context)
        contexts.append(ctx)
        query = tok.encode(ex.question)[:max_query_length]
        answer = None
        # An answer given as "" is no answer (evaluate-v2.0.py scores it against ""): [CLS].
        if is_training and not ex.is_impossible and gold_answers(ex) != [""]:
            if not ex.answers:
                raise FormatError(
                    f"training question {ex.qid} has no answer and is not marked is_impossible"
                )
            chars = _answer_chars(ex.context, *ex.answers[0])
            answer = _answer_pieces(ctx, *chars) if chars else None
            if answer is None:
                skipped += 1
                continue
        max_doc = max_seq_length - len(query) - 3
        spans, start = [], 0
        while start < len(ctx.ids) or not spans:
            length = min(len(ctx.ids) - start, max_doc)
            spans.append((start, length))
            if start + length >= len(ctx.ids):
                break
            start += min(length, doc_stride)
        for s_i, (doc_start, length) in enumerate(spans):
            ids_b = ctx.ids[doc_start : doc_start + length]
            input_ids, mask, segments = pack(tok, query, ids_b, max_seq_length)
            offset = len(query) + 2
            s_pos = e_pos = 0
            if answer is not None and doc_start <= answer[0] and answer[1] < doc_start + length:
                s_pos, e_pos = answer[0] - doc_start + offset, answer[1] - doc_start + offset
            for key, value in zip(rows, (input_ids, mask, segments, s_pos, e_pos)):
                rows[key].append(value)
            max_ctx = np.array(
                [_max_context(spans, s_i, doc_start + j) for j in range(length)], bool
            )
            windows.append(Window(ex_i, offset, doc_start, length, max_ctx))
    if skipped:
        cli.warn(
            f"skipped {skipped} training questions whose answer text is not in the words at "
            "answer_start"
        )
    if not windows:
        raise FormatError(
            "no usable questions: every answer's text differs from the context at its answer_start"
        )
    arrays = {k: np.asarray(v, np.int32) for k, v in rows.items()}
    return arrays, windows, contexts


def best_answers(
    examples: Sequence[QAExample],
    windows: Sequence[Window],
    contexts: Sequence[ContextPieces],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    *,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, float]]:
    """Window logits [windows, length] -> ({qid: answer text}, {qid: null score - best span score});
    the second dict (the official script's na_probs input) is only filled for v2.0."""
    best: dict[int, tuple[float, int, int]] = {}  # example -> (score, char start, char end)
    null: dict[int, float] = {}
    for w, window in enumerate(windows):
        s, e = start_logits[w], end_logits[w]
        ex = window.example_index
        null[ex] = min(null.get(ex, np.inf), float(s[0] + e[0]))
        ctx = contexts[ex]
        lo, hi = window.offset, window.offset + window.length  # context positions [lo, hi)
        # As run_squad.py: the n_best_size best positions of the whole row, those in the context.
        starts = [i for i in np.argsort(-s, kind="stable")[:n_best_size] if lo <= i < hi]
        ends = [j for j in np.argsort(-e, kind="stable")[:n_best_size] if lo <= j < hi]
        for i in starts:
            if not window.max_context[i - lo]:
                continue
            for j in ends:
                if j < i or j - i + 1 > max_answer_length:
                    continue
                score = float(s[i] + e[j])
                if ex not in best or score > best[ex][0]:
                    a, b = window.doc_start + i - lo, window.doc_start + j - lo
                    best[ex] = (score, ctx.starts[a], ctx.ends[b])
    answers, null_diffs = {}, {}
    for ex_i, ex in enumerate(examples):
        if ex_i not in null:
            continue  # dropped while encoding
        score, c0, c1 = best.get(ex_i, (-np.inf, 0, 0))
        text = ex.context[c0:c1]
        if version_2_with_negative:
            diff = null[ex_i] - score
            null_diffs[ex.qid] = float(diff) if np.isfinite(diff) else 1e9
            if diff > null_score_diff_threshold:
                text = ""
        answers[ex.qid] = text
    return answers, null_diffs


def gold_answers(ex: QAExample) -> list[str]:
    """The gold texts the official scripts compare against (none for an impossible question)."""
    return [] if ex.is_impossible else [text for text, _ in ex.answers]


def write_predictions(path: str, answers: dict[str, str], null_diffs: dict[str, float]) -> None:
    """predictions.json ({qid: text}, the official scripts' input) and, for v2.0, null_odds.json."""
    storage.makedirs(storage.dirname(path))
    with storage.open_write(path, "w") as f:
        json.dump(answers, f, indent=2, ensure_ascii=False)
    if null_diffs:
        with storage.open_write(os.path.splitext(path)[0] + "_null_odds.json", "w") as f:
            json.dump(null_diffs, f, indent=2)
