"""Fine-tuning metrics against hand-worked examples and independent reference computations."""

import collections
import itertools

import numpy as np
import pytest
import scipy.stats

from bert_jax.finetune import metrics


def test_accuracy_and_binary_f1_by_hand():
    preds = [1, 1, 0, 0, 1, 0]
    labels = [1, 0, 0, 1, 1, 0]
    # tp=2 (0, 4), fp=1 (1), fn=1 (3), tn=2
    assert metrics.accuracy(preds, labels) == pytest.approx(4 / 6)
    assert metrics.f1_binary(preds, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert metrics.f1_binary([0, 0], [1, 0]) == 0.0


def test_matthews_matches_the_binary_formula():
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, 50)
        preds = np.where(rng.random(50) < 0.7, labels, 1 - labels)
        tp = np.sum((preds == 1) & (labels == 1))
        tn = np.sum((preds == 0) & (labels == 0))
        fp = np.sum((preds == 1) & (labels == 0))
        fn = np.sum((preds == 0) & (labels == 1))
        expected = (tp * tn - fp * fn) / np.sqrt(
            float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        )
        assert metrics.matthews_corrcoef(preds, labels) == pytest.approx(expected)


def test_matthews_edge_cases_and_multiclass():
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction
    assert metrics.matthews_corrcoef([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
    # Multi-class MCC of a perfect anti-diagonal 2-class case is -1.
    assert metrics.matthews_corrcoef([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)


def test_correlations_match_numpy_and_ranks():
    rng = np.random.default_rng(1)
    x = rng.normal(size=40)
    y = 0.5 * x + rng.normal(size=40)
    out = metrics.correlations(x, y)
    assert out["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    ranks = scipy.stats.rankdata
    assert out["spearman"] == pytest.approx(np.corrcoef(ranks(x), ranks(y))[0, 1])
    assert metrics.correlations([1.0, 1.0, 1.0], [0.0, 1.0, 2.0]) == {
        "pearson": 0.0,
        "spearman": 0.0,
    }


def test_metric_inputs_are_checked():
    with pytest.raises(ValueError, match="equal-length"):
        metrics.accuracy([1, 0], [1])
    with pytest.raises(ValueError, match="no examples"):
        metrics.accuracy([], [])


@pytest.mark.parametrize(
    "tags, expected",
    [
        (["B-PER", "I-PER", "O", "B-LOC"], {(0, 1, "PER"), (3, 3, "LOC")}),
        # IOB1 (CoNLL-2003's own files): I- starts an entity, B- only splits two adjacent ones.
        (["I-ORG", "I-ORG", "B-ORG", "O", "I-LOC"], {(0, 1, "ORG"), (2, 2, "ORG"), (4, 4, "LOC")}),
        # A type change inside a run starts a new entity; a stray I- after O starts one too.
        (
            ["B-PER", "I-LOC", "O", "I-MISC", "I-MISC"],
            {(0, 0, "PER"), (1, 1, "LOC"), (3, 4, "MISC")},
        ),
        # IOBES
        (
            ["S-PER", "B-LOC", "E-LOC", "B-LOC", "I-LOC", "E-LOC"],
            {(0, 0, "PER"), (1, 2, "LOC"), (3, 5, "LOC")},
        ),
        (["O", "O"], set()),
    ],
)
def test_entities_follow_conlleval(tags, expected):
    assert metrics.entities(tags) == expected


def _conlleval_chunks(tags):
    """conlleval's chunks, transcribed from its endOfChunk/startOfChunk (with IOBES's S, as
    seqeval has them) and its tag split at the first '-' (an untyped 'B' has type '')."""
    out, start, prev, prev_type = set(), None, "O", ""
    for i, raw in enumerate([*tags, "O"]):
        tag, _, kind = raw.partition("-")
        ends = (
            prev in "ES"
            or (prev, tag) in {(p, t) for p in "BI" for t in "BSO"}
            or (prev != "O" and prev_type != kind)
        )
        if ends and start is not None:
            out.add((start, i - 1, prev_type))
            start = None
        if tag in "BS" or (prev in "ESO" and tag in "IE") or (tag != "O" and prev_type != kind):
            start = i
        prev, prev_type = tag, kind
    return out


def test_entities_match_conlleval_on_random_tag_sequences():
    # Untyped tags (B, I, O chunking) as well as typed ones, mixed.
    pool = ["O", "B", "I", "E", "S", "B-PER", "I-PER", "E-PER", "S-PER", "I-LOC", "B-LOC"]
    rng = np.random.default_rng(0)
    for _ in range(2000):
        tags = list(rng.choice(pool, size=int(rng.integers(0, 10))))
        assert metrics.entities(tags) == _conlleval_chunks(tags), tags
    # B I I against I I I: the same untyped chunk.
    assert metrics.entity_f1([["B", "I", "I"]], [["I", "I", "I"]])["f1"] == 1.0


def test_bilou_tags_read_as_iobes():
    # BILOU (spaCy's scheme): L- ends an entity as E- does, U- is a one-word entity as S- is.
    pool = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC", "S-LOC", "B", "E", "S"]
    rng = np.random.default_rng(1)
    for _ in range(1000):
        iobes = list(rng.choice(pool, size=int(rng.integers(0, 10))))
        bilou = [t.replace("E", "L", 1) if t[0] == "E" else t for t in iobes]
        bilou = [t.replace("S", "U", 1) if t[0] == "S" else t for t in bilou]
        assert metrics.entities(bilou) == metrics.entities(iobes), bilou
    # Gold PER (0-1), LOC (2), LOC (3); predicted PER (0-1), LOC (2-3): P 1/2, R 1/3.
    gold, pred = [["B-PER", "L-PER", "U-LOC", "U-LOC"]], [["B-PER", "I-PER", "B-LOC", "L-LOC"]]
    assert metrics.entity_f1(gold, pred)["f1"] == pytest.approx(0.4)


def test_entity_f1_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-MISC"]]
    # gold 3 entities, predicted 3, correct 2 (PER, ORG)
    out = metrics.entity_f1(gold, pred)
    assert out["precision"] == pytest.approx(2 / 3)
    assert out["recall"] == pytest.approx(2 / 3)
    assert out["f1"] == pytest.approx(2 / 3)
    assert out["accuracy"] == pytest.approx(4 / 6)
    # A boundary error is a miss, not partial credit.
    assert metrics.entity_f1([["B-PER", "I-PER"]], [["B-PER", "O"]])["f1"] == 0.0


@pytest.mark.parametrize(
    "text, normalized",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        # Punctuation goes before articles: "apple,a" becomes "applea", which holds no article.
        ("  an   apple,a pear ", "applea pear"),
        ("Theatre", "theatre"),
        ("A.D. 1066", "ad 1066"),
    ],
)
def test_squad_normalization(text, normalized):
    assert metrics.normalize_answer(text) == normalized


def test_squad_exact_and_f1_by_hand():
    # pred tokens [eiffel, tower, in, paris], gold [eiffel, tower]: P=2/4, R=1 -> F1=2/3
    assert metrics.token_f1("the Eiffel Tower in Paris", "Eiffel Tower") == pytest.approx(2 / 3)
    assert metrics.exact_match("The Eiffel tower.", "eiffel Tower") == 1.0
    scores = metrics.squad_scores(
        {"q1": "Eiffel Tower in Paris", "q2": "1889", "q3": "wrong"},
        {"q1": ["the Eiffel Tower", "Eiffel Tower in Paris"], "q2": ["in 1889"], "q3": ["right"]},
    )
    # q1: exact via the second gold; q2: F1 2*(1*0.5)/(1.5)=2/3; q3: 0
    assert scores["exact"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert "has_ans_exact" not in scores


def test_squad_v2_no_answer_handling():
    gold = {"a": ["Paris"], "b": [], "c": [""], "d": []}
    preds = {"a": "Paris", "b": "", "c": "something", "d": "x"}
    scores = metrics.squad_scores(preds, gold)
    # a right, b right (empty for unanswerable), c and d wrong. c's answer given as "" is
    # scored against "" but counts as answerable, as in evaluate-v2.0.py (its answers list is
    # not empty; it counted as unanswerable before).
    assert scores["exact"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(50.0)
    assert scores["has_ans_exact"] == 50.0 and scores["has_ans_total"] == 2
    assert scores["no_ans_exact"] == 50.0 and scores["no_ans_total"] == 2
    # A missing prediction scores 0.
    assert metrics.squad_scores({}, {"a": ["x"]})["f1"] == 0.0


def test_token_f1_matches_a_brute_force_count():
    words = ["cat", "dog", "the", "cat", "bird"]
    for pred, gold in itertools.product(
        itertools.combinations(words, 2), itertools.combinations(words, 3)
    ):
        p, g = (
            metrics.normalize_answer(" ".join(pred)).split(),
            metrics.normalize_answer(" ".join(gold)).split(),
        )
        got = metrics.token_f1(" ".join(pred), " ".join(gold))
        if not p or not g:
            assert got == float(p == g)
            continue
        same = sum(min(p.count(w), g.count(w)) for w in set(p))
        expected = (
            0.0
            if same == 0
            else 2 * (same / len(p)) * (same / len(g)) / (same / len(p) + same / len(g))
        )
        assert got == pytest.approx(expected)


def test_multiclass_precision_recall_f1_by_hand():
    """scikit-learn's definitions, worked by hand: per class tp / predicted, tp / gold,
    2 tp / (predicted + gold); macro = the plain mean over classes seen in gold or predictions."""
    labels = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    preds = [0, 1, 0, 1, 2, 2, 2, 0, 2, 1]
    # class 0: tp 2, predicted 3, gold 3 | 1: tp 1, predicted 3, gold 2
    # class 2: tp 3, predicted 4, gold 4 | 3: tp 0, predicted 0, gold 1 (precision 0 by convention)
    # class 4 ("e"): never gold nor predicted: reported as 0 and left out of the macro mean.
    got = metrics.classification_metrics(preds, labels, ("a", "b", "c", "d", "e"))
    precision = [2 / 3, 1 / 3, 3 / 4, 0.0]
    recall = [2 / 3, 1 / 2, 3 / 4, 0.0]
    f1 = [2 * 2 / 6, 2 * 1 / 5, 2 * 3 / 8, 0.0]
    for name, want in (("precision", precision), ("recall", recall), ("f1", f1)):
        assert [got[f"{name}/{c}"] for c in "abcd"] == pytest.approx(want), name
        assert got[f"{name}/e"] == 0.0
        assert got[f"macro_{name}"] == pytest.approx(np.mean(want)), name
    assert got["accuracy"] == pytest.approx(6 / 10)
    assert "f1" not in got  # the positive-class F1 is for two classes only


def test_macro_f1_matches_a_confusion_matrix_on_random_predictions():
    rng = np.random.default_rng(0)
    for _ in range(10):
        labels = rng.integers(0, 5, 200)
        preds = np.where(rng.random(200) < 0.6, labels, rng.integers(0, 5, 200))
        confusion = np.zeros((5, 5))
        np.add.at(confusion, (labels, preds), 1)
        tp = np.diag(confusion)
        f1 = 2 * tp / (confusion.sum(0) + confusion.sum(1))
        got = metrics.classification_metrics(preds, labels, tuple("abcde"))
        assert got["macro_f1"] == pytest.approx(f1.mean())
        assert got["macro_precision"] == pytest.approx((tp / confusion.sum(0)).mean())
        assert got["macro_recall"] == pytest.approx((tp / confusion.sum(1)).mean())


def test_two_classes_keep_the_positive_class_f1_only():
    got = metrics.classification_metrics([1, 0, 1], [1, 1, 0], ("0", "1"))
    assert set(got) == {"accuracy", "mcc", "f1"}


def _official_v2(gold, preds):
    """evaluate-v2.0.py's figures (its normalize_answer is the one tested above): the has/no
    answer split goes by whether the answers list is empty, the scores by the gold texts that
    normalize to something ([""] when none do)."""
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        texts = [a for a in answers if metrics.normalize_answer(a)] or [""]
        exact[qid] = max(metrics.exact_match(preds[qid], a) for a in texts)
        f1[qid] = max(metrics.token_f1(preds[qid], a) for a in texts)
    out = {"exact": 100 * np.mean(list(exact.values())), "f1": 100 * np.mean(list(f1.values()))}
    for name, keep in (("has_ans", True), ("no_ans", False)):
        ids = [q for q, answers in gold.items() if bool(answers) == keep]
        if ids:
            out[f"{name}_exact"] = 100 * np.mean([exact[q] for q in ids])
            out[f"{name}_f1"] = 100 * np.mean([f1[q] for q in ids])
            out[f"{name}_total"] = len(ids)
    return out


def test_squad_v2_split_matches_the_official_script_on_random_questions():
    # Gold answers that normalize to "" ("The", "-") leave an answerable question scored
    # against [""], but the official script still counts it under HasAns.
    words = ["the", "An", "cat", "Cat.", "-", "ünï", "x,y", "\u00a0", "1,000", "a dog"]
    rng = np.random.default_rng(0)

    def text(lo):
        return " ".join(rng.choice(words, size=int(rng.integers(lo, 4))))

    for _ in range(300):
        gold = {  # no answer, an answer given as "", answers
            f"q{i}": [[], [""], [text(1) for _ in range(rng.integers(1, 3))]][
                int(rng.choice(3, p=[0.3, 0.1, 0.6]))
            ]
            for i in range(rng.integers(1, 6))
        }
        preds = {q: text(0) for q in gold}
        ours = metrics.squad_scores(preds, gold)
        ref = _official_v2(gold, preds)
        if "no_ans_total" not in ref:  # no unanswerable question: v1.1's figures alone
            ref = {k: ref[k] for k in ("exact", "f1")}
        assert {k: v for k, v in ours.items() if k != "total"} == pytest.approx(ref), gold


def _official_v1(gold, preds):
    """evaluate-v1.1.py: every gold text counts; F1 0 without a common word (no empty case)."""

    def f1(pred, truth):
        p, g = metrics.normalize_answer(pred).split(), metrics.normalize_answer(truth).split()
        same = sum((collections.Counter(p) & collections.Counter(g)).values())
        if same == 0:
            return 0
        return 2 * (same / len(p)) * (same / len(g)) / (same / len(p) + same / len(g))

    em = [max(metrics.exact_match(preds[q], t) for t in texts) for q, texts in gold.items()]
    f = [max(f1(preds[q], t) for t in texts) for q, texts in gold.items()]
    return {"exact": 100 * np.mean(em), "f1": 100 * np.mean(f)}


def test_squad_v1_figures_match_evaluate_v1_1_on_random_questions():
    # Gold texts and predictions that normalize to "" ("The", "-", "a") are where v1.1 and v2.0
    # differ: v1.1 keeps such a gold text (matched exactly by "a", with F1 0).
    words = ["the", "An", "cat", "Cat.", "-", "ünï", "x,y", "1,000", "a dog"]
    rng = np.random.default_rng(1)

    def text(lo):
        return " ".join(rng.choice(words, size=int(rng.integers(lo, 3))))

    for _ in range(300):
        gold = {f"q{i}": [text(1) for _ in range(rng.integers(1, 3))] for i in range(4)}
        preds = {q: text(0) for q in gold}
        ours = metrics.squad_scores(preds, gold, version_2=False)
        assert {k: v for k, v in ours.items() if k != "total"} == pytest.approx(
            _official_v1(gold, preds)
        ), (gold, preds)
