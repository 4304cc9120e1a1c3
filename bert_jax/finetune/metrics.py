"""The benchmarks' metrics, plain Python/numpy values in, floats out: GLUE's (scikit-learn's
definitions), CoNLL entity F1 as conlleval counts it, SQuAD exact/F1 as the official scripts do.
docs/finetuning.md has each task's figures.
"""

import collections
import re
import string
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.stats


def _pair(preds, labels) -> tuple[np.ndarray, np.ndarray]:
    preds, labels = np.asarray(preds), np.asarray(labels)
    if preds.shape != labels.shape or preds.ndim != 1:
        raise ValueError(
            f"predictions {preds.shape} and labels {labels.shape} must be equal-length vectors"
        )
    if preds.size == 0:
        raise ValueError("no examples to score")
    return preds, labels


def accuracy(preds, labels) -> float:
    preds, labels = _pair(preds, labels)
    return float(np.mean(preds == labels))


def f1_binary(preds, labels, positive: int = 1) -> float:
    """F1 of the positive class; 0 when there are no true positives."""
    preds, labels = _pair(preds, labels)
    tp = np.sum((preds == positive) & (labels == positive))
    predicted, gold = np.sum(preds == positive), np.sum(labels == positive)  # tp + fp, tp + fn
    return float(2 * tp / (predicted + gold)) if tp else 0.0


def matthews_corrcoef(preds, labels) -> float:
    """Matthews correlation (Gorodkin's multi-class form); 0 when either side is constant."""
    preds, labels = _pair(preds, labels)
    classes = np.union1d(preds, labels)
    p = np.searchsorted(classes, preds)
    t = np.searchsorted(classes, labels)
    confusion = np.zeros((len(classes), len(classes)), np.float64)
    np.add.at(confusion, (t, p), 1)
    true_counts, pred_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, n = np.trace(confusion), confusion.sum()
    cov_tp = correct * n - true_counts @ pred_counts
    cov_pp = n * n - pred_counts @ pred_counts
    cov_tt = n * n - true_counts @ true_counts
    if cov_pp == 0 or cov_tt == 0:
        return 0.0
    return float(cov_tp / np.sqrt(cov_tt * cov_pp))


def correlations(preds, labels) -> dict[str, float]:
    """Pearson and Spearman correlation; nan-free (0.0) when either side is constant."""
    preds, labels = _pair(np.asarray(preds, np.float64), np.asarray(labels, np.float64))
    if np.ptp(preds) == 0 or np.ptp(labels) == 0:
        return {"pearson": 0.0, "spearman": 0.0}
    return {
        "pearson": float(scipy.stats.pearsonr(preds, labels)[0]),
        "spearman": float(scipy.stats.spearmanr(preds, labels)[0]),
    }


def classification_metrics(preds, labels, label_names: Sequence[str]) -> dict[str, float]:
    """accuracy and Matthews correlation; plus F1 of class 1 for two classes; for more, macro
    precision/recall/F1 and each class's (`precision/<name>`, `recall/<name>`, `f1/<name>`)."""
    out = {"accuracy": accuracy(preds, labels), "mcc": matthews_corrcoef(preds, labels)}
    if len(label_names) == 2:
        out["f1"] = f1_binary(preds, labels)
    elif len(label_names) > 2:  # per class id 0..n-1, then the means over the classes seen
        preds, labels = _pair(preds, labels)
        ids = np.arange(len(label_names))[:, None]
        tp = np.sum((preds == ids) & (labels == ids), axis=1).astype(np.float64)
        predicted, support = np.sum(preds == ids, axis=1), np.sum(labels == ids, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            scores = {
                "precision": np.where(predicted > 0, tp / predicted, 0.0),
                "recall": np.where(support > 0, tp / support, 0.0),
                "f1": np.where(tp > 0, 2 * tp / (predicted + support), 0.0),
            }
        seen = (support > 0) | (predicted > 0)
        for name, values in scores.items():
            out[f"macro_{name}"] = float(np.mean(values[seen]))
        for i, label in enumerate(label_names):
            for name, values in scores.items():
                out[f"{name}/{label}"] = float(values[i])
    return out


def regression_metrics(preds, labels) -> dict[str, float]:
    preds, labels = _pair(np.asarray(preds, np.float64), np.asarray(labels, np.float64))
    return {**correlations(preds, labels), "mse": float(np.mean((preds - labels) ** 2))}


# Chunk prefixes: IOB1/IOB2/IOBES's own, and BILOU's last (L) and unit (U) as IOBES's E and S.
_PREFIXES = {"B": "B", "I": "I", "E": "E", "S": "S", "L": "E", "U": "S"}


def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''); untyped 'B' -> ('B', ''); BILOU's 'L-PER' ->
    ('E', 'PER'); a bare type 'PER' is an inside tag."""
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    if prefix in _PREFIXES and (sep or not kind):
        return _PREFIXES[prefix], kind
    return "I", tag


def _ends(prev_tag, tag, prev_type, kind) -> bool:
    # conlleval's endOfChunk
    return (
        prev_tag in ("E", "S")
        or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
        or (prev_tag != "O" and prev_type != kind)
    )


def _starts(prev_tag, tag, prev_type, kind) -> bool:
    # conlleval's startOfChunk
    return (
        tag in ("B", "S")
        or (prev_tag in ("E", "S", "O") and tag in ("I", "E"))
        or (tag != "O" and prev_type != kind)
    )


def entities(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """The (first, last, type) entities of one sentence's tags, by conlleval's rules."""
    out, start = set(), None
    prev_tag, prev_type = "O", ""
    for i, raw in enumerate(list(tags) + ["O"]):  # a final O closes an open entity
        tag, kind = _split_tag(raw)
        if start is not None and _ends(prev_tag, tag, prev_type, kind):
            out.add((start, i - 1, prev_type))
            start = None
        if _starts(prev_tag, tag, prev_type, kind):
            start = i
        prev_tag, prev_type = tag, kind
    return out


def entity_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> dict[str, float]:
    """Entity precision/recall/F1 over sentences, and the token accuracy."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    n_gold = n_pred = n_correct = tokens = token_correct = 0
    for g, p in zip(gold, pred):
        if len(g) != len(p):
            raise ValueError(f"a sentence has {len(g)} gold tags but {len(p)} predicted")
        ge, pe = entities(g), entities(p)
        n_gold, n_pred, n_correct = n_gold + len(ge), n_pred + len(pe), n_correct + len(ge & pe)
        tokens += len(g)
        token_correct += sum(a == b for a, b in zip(g, p))
    precision = n_correct / n_pred if n_pred else 0.0
    recall = n_correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if n_correct else 0.0
    accuracy = token_correct / tokens if tokens else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "accuracy": accuracy}


_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, drop articles, collapse whitespace (in the official order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, version_2: bool = True) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version_2 and (not pred_tokens or not gold_tokens):  # v2.0: right only if both are empty
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(
    predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]], version_2: bool = True
) -> dict[str, float]:
    """{qid: predicted text} against {qid: gold texts} -> exact/f1 in percent. Gold texts that
    normalize to "" are dropped and a question left with none is scored against [""], as
    evaluate-v2.0.py does; a question is unanswerable (no_ans_*) when it has no gold text ([]),
    answerable (has_ans_*) otherwise, even when its texts normalize to "" (an answer "The" or
    ""), as the official split by its answers list has it; the has_ans_* / no_ans_*
    figures come when unanswerable questions are present. A question without a prediction
    scores 0, as in the official scripts (which also warn about it). With `version_2` False,
    evaluate-v1.1.py's rules: every gold text counts, and an F1 is 0 without a common word (a
    gold "The" is matched exactly by "a", with F1 0)."""
    if not gold:
        raise ValueError("no gold answers to score against")
    exact, f1, answerable = {}, {}, {}
    for qid, texts in gold.items():
        answerable[qid] = bool(texts)
        texts = [t for t in texts if normalize_answer(t) or not version_2] or [""]
        pred = predictions.get(qid)
        if pred is None:
            exact[qid] = f1[qid] = 0.0
            continue
        exact[qid] = max(exact_match(pred, t) for t in texts)
        f1[qid] = max(token_f1(pred, t, version_2) for t in texts)
    out = {
        "exact": 100.0 * np.mean(list(exact.values())),
        "f1": 100.0 * np.mean(list(f1.values())),
        "total": float(len(gold)),
    }
    if version_2 and not all(answerable.values()):
        for name, keep in (("has_ans", True), ("no_ans", False)):
            ids = [q for q in gold if answerable[q] == keep]
            if ids:
                out[f"{name}_exact"] = 100.0 * np.mean([exact[q] for q in ids])
                out[f"{name}_f1"] = 100.0 * np.mean([f1[q] for q in ids])
                out[f"{name}_total"] = float(len(ids))
    return {k: float(v) for k, v in out.items()}
