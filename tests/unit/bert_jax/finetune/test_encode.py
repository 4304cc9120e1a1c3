"""Fine-tuning data: GLUE TSV layouts, CoNLL files, SQuAD JSON, and their encoding into inputs."""

import json
import random
import time

import ml_collections
import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.finetune import encode, glue, squad, tasks
from bert_jax.text import tokenization


@pytest.fixture(scope="module")
def tok(vocab_file):
    return tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- GLUE ------------------------------------------------------------------------------------


def test_glue_layouts_with_headers(tmp_path):
    sst = write(
        tmp_path / "train.tsv", "sentence\tlabel\nit 's a charming journey . \t1\nbland\t0\n"
    )
    assert glue.read_tsv(sst, glue.LAYOUTS["sst2"]) == [
        glue.TextExample("train-2", "it 's a charming journey . ", None, "1"),
        glue.TextExample("train-3", "bland", None, "0"),
    ]
    mrpc = write(
        tmp_path / "msr.tsv",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        '1\t702876\t702977\tAmrozi accused "his brother"\tReferring to him\n',
    )
    (ex,) = glue.read_tsv(mrpc, glue.LAYOUTS["mrpc"])
    assert (ex.text_a, ex.text_b, ex.label) == (
        'Amrozi accused "his brother"',
        "Referring to him",
        "1",
    )
    stsb = write(
        tmp_path / "sts.tsv",
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
        "sentence1\tsentence2\tscore\n"
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
        "A plane is taking off.\tAn air plane is taking off.\t5.000\n",
    )
    (ex,) = glue.read_tsv(stsb, glue.LAYOUTS["stsb"])
    assert (ex.guid, ex.text_b, ex.label) == ("0", "An air plane is taking off.", "5.000")


def test_mnli_matched_and_test_files(tmp_path, tok):
    header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
        "sentence1_parse\tsentence2_parse\tsentence1\tsentence2"
    )
    dev = write(
        tmp_path / "dev_matched.tsv",
        header + "\tlabel1\tgold_label\n"
        '0\t63735\t63735n\tslate\t(x)\t(y)\t(X)\t(Y)\tThe new rights are "nice"\t'
        "Everyone loves them\tneutral\tneutral\n",
    )
    (ex,) = glue.read_tsv(dev, glue.LAYOUTS["mnli"])
    assert (ex.text_a, ex.text_b, ex.label) == (
        'The new rights are "nice"',
        "Everyone loves them",
        "neutral",
    )
    test = write(
        tmp_path / "test_matched.tsv", header + "\n0\t1\t1n\tslate\t(x)\t(y)\t(X)\t(Y)\tA\tB\n"
    )
    (ex,) = glue.read_tsv(test, glue.LAYOUTS["mnli"])
    assert (ex.guid, ex.text_a, ex.text_b, ex.label) == ("0", "A", "B", None)
    # A label outside the set is named by its line, not only by the index column's id.
    unseen = write(
        tmp_path / "dev_mismatched.tsv",
        header
        + "\tgold_label\n"
        + "\n".join(
            f"{i + 40}\t1\t1n\tslate\t(x)\t(y)\t(X)\t(Y)\tA\tB\t{label}"
            for i, label in enumerate(["neutral", "entailment", "hidden"])
        ),
    )
    examples = glue.read_tsv(unseen, glue.LAYOUTS["mnli"])
    with pytest.raises(encode.FormatError, match=r"^line 4, example 42: label 'hidden'"):
        encode.encode_texts(tok, examples, 16, glue.LAYOUTS["mnli"].labels)


def test_cola_headerless_train_and_headed_test(tmp_path):
    train = write(
        tmp_path / "in_domain_train.tsv",
        "gj04\t1\t\tOur friends won't buy this analysis.\nclc95\t0\t*\tThey drank the pub.\n",
    )
    examples = glue.read_tsv(train, glue.LAYOUTS["cola"])
    assert [(e.text_a, e.label) for e in examples] == [
        ("Our friends won't buy this analysis.", "1"),
        ("They drank the pub.", "0"),
    ]
    test = write(tmp_path / "test.tsv", "index\tsentence\n0\tBill whistled.\n")
    assert glue.read_tsv(test, glue.LAYOUTS["cola"]) == [
        glue.TextExample("0", "Bill whistled.", None, None)
    ]


def test_a_lone_carriage_return_is_text_and_crlf_a_line_end(tmp_path):
    """The issue's case: a lone CR inside a field cut the row in two, reported as a missing
    field. Windows line ends (CRLF) still end lines."""
    path = tmp_path / "cr.tsv"
    path.write_bytes(b"sentence\tlabel\r\ngood\rmovie\t1\r\nbad one\t0\n")
    examples = glue.read_tsv(str(path), glue.LAYOUTS["sst2"])
    assert [(e.text_a, e.label) for e in examples] == [("good\rmovie", "1"), ("bad one", "0")]


def test_glue_errors_say_what_to_fix(tmp_path):
    with pytest.raises(encode.FormatError, match="no column 'sentence'"):
        glue.read_tsv(write(tmp_path / "a.tsv", "text\tlabel\nx\t1\n"), glue.LAYOUTS["sst2"])
    with pytest.raises(encode.FormatError, match=r"b.tsv:3: 1 tab-separated fields"):
        glue.read_tsv(
            write(tmp_path / "b.tsv", "sentence\tlabel\nx\t1\nbroken line\n"), glue.LAYOUTS["sst2"]
        )
    # A short row whose missing field is the id column (after the texts and label): the same
    # line-numbered error, not an IndexError.
    with pytest.raises(encode.FormatError, match=r"c.tsv:3: 2 tab-separated fields"):
        glue.read_tsv(
            write(tmp_path / "c.tsv", "sentence\tlabel\tindex\nx\t1\t7\ny\t0\n"),
            glue.LAYOUTS["sst2"],
        )
    with pytest.raises(ValueError, match="unknown GLUE layout 'sst'"):
        glue.get_layout("sst")
    with pytest.raises(cli.UserError, match=r"missing\.tsv' does not exist"):
        glue.read_tsv(str(tmp_path / "missing.tsv"), glue.LAYOUTS["sst2"])


def test_encode_texts_pairs_segments_truncation(tok):
    examples = [
        glue.TextExample("1", "hello world", "good morning", "entailment"),
        glue.TextExample("2", "a " * 20, "b " * 3, None),
    ]
    out = encode.encode_texts(tok, examples, 12, ("contradiction", "entailment", "neutral"))
    hello, world, good, morning = tok.encode("hello world good morning")
    assert out[F.INPUT_IDS][0].tolist() == [
        101,
        hello,
        world,
        102,
        good,
        morning,
        102,
        0,
        0,
        0,
        0,
        0,
    ]
    assert out[F.SEGMENT_IDS][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0]
    assert out[F.INPUT_MASK][0].tolist() == [1] * 7 + [0] * 5
    assert out[encode.LABEL].tolist() == [1, 0]
    # The longer side loses tokens from its end until 9 (= 12 - 3 specials) fit: 6 a's + 3 b's.
    a, b = tok.encode("a b")
    assert out[F.INPUT_IDS][1].tolist() == [101] + [a] * 6 + [102] + [b] * 3 + [102]
    reg = encode.encode_texts(tok, [glue.TextExample("1", "x", "y", "3.8")], 8, ())
    assert reg[encode.LABEL].dtype == np.float32 and reg[encode.LABEL][0] == pytest.approx(3.8)
    with pytest.raises(encode.FormatError, match="label 'maybe' is not one of"):
        encode.encode_texts(tok, [glue.TextExample("7", "x", None, "maybe")], 8, ("0", "1"))
    with pytest.raises(encode.FormatError, match="not a finite number"):
        encode.encode_texts(tok, [glue.TextExample("7", "x", "y", "high")], 8, ())


# --- CoNLL -----------------------------------------------------------------------------------


CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
"""


def test_conll_reader_docstart_blank_lines_columns(tmp_path, tok):
    path = write(tmp_path / "train.txt", CONLL)
    sentences = tasks.read_conll(path)
    assert [s.words for s in sentences] == [
        ("EU", "rejects", "German", "call", "."),
        ("Peter", "Blackburn"),
        ("BRUSSELS",),
    ]
    assert sentences[1].tags == ("B-PER", "I-PER")
    assert sentences[0].guid == "train-3"
    assert tasks.read_conll(path, tag_column=1)[0].tags == ("NNP", "VBZ", "JJ", "NN", ".")
    assert tasks.tag_set(sentences) == ("O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER")
    words_only = tasks.read_conll(write(tmp_path / "test.txt", "EU\nrejects\n\nPeter\n"))
    assert [(s.words, s.tags) for s in words_only] == [
        (("EU", "rejects"), None),
        (("Peter",), None),
    ]
    with pytest.raises(encode.FormatError, match="holds no sentences"):
        tasks.read_conll(write(tmp_path / "empty.txt", "-DOCSTART- -X- O\n\n"))
    data = ml_collections.ConfigDict({"labels": (), "train_file": str(tmp_path / "test.txt")})
    with pytest.raises(encode.FormatError, match=r"test.txt has no tag column"):
        tasks.TaggingTask(data).labels(words_only)  # the file was named nowhere
    with pytest.raises(encode.FormatError, match=r"bad.txt:2: 1 columns"):
        tasks.read_conll(write(tmp_path / "bad.txt", "EU B-ORG\nrejects\n"))
    # A tagged file whose first token line lost its tag is not a words-only file (it was read
    # as one: a training file "had no tag column", an eval file "no labels", a test file's
    # tags were never scored).
    with pytest.raises(encode.FormatError, match=r"lost.txt:2: a word without a tag, but line 3"):
        tasks.read_conll(write(tmp_path / "lost.txt", "-DOCSTART- O\nEU\nrejects O\n"))
    # A tag outside the set (a dev tag unseen in train) is named by its own line.
    dev = tasks.read_conll(write(tmp_path / "valid.txt", "a O\n\nb O\nc B-NEW\n"))
    with pytest.raises(encode.FormatError, match=r"^line 4 \(sentence valid-3\): tag 'B-NEW'"):
        encode.encode_tagged(tok, dev, 16, ("O",))


def test_encode_tagged_labels_first_piece_and_cuts(tok):
    sentence = tasks.TaggedSentence(
        "s", ("Playing", "tokenization", "Paris"), ("O", "B-MISC", "B-LOC")
    )
    labels = ("O", "B-LOC", "B-MISC")
    arrays, starts = encode.encode_tagged(tok, [sentence], 16, labels)
    pieces = tok.convert_ids_to_tokens(arrays[F.INPUT_IDS][0][arrays[F.INPUT_MASK][0] == 1])
    assert pieces == ["[CLS]", "playing", "token", "##ization", "paris", "[SEP]"]
    assert starts[0].tolist() == [1, 2, 4]
    assert arrays[encode.LABEL_WEIGHTS][0].tolist()[:6] == [0, 1, 1, 0, 1, 0]
    assert arrays[encode.LABEL_IDS][0].tolist()[:6] == [0, 0, 2, 0, 1, 0]
    # Length 5 fits [CLS] playing token ##ization [SEP] -> "paris" is cut and predicted "O".
    arrays, starts = encode.encode_tagged(tok, [sentence], 5, labels)
    assert starts[0].tolist() == [1, 2, -1]
    assert arrays[encode.LABEL_WEIGHTS][0].sum() == 2
    preds = np.zeros((1, 5), np.int64)
    preds[0, 2] = 2
    assert encode.word_predictions(preds, starts, labels) == [["O", "B-MISC", "O"]]


# --- SQuAD -----------------------------------------------------------------------------------


def squad_file(tmp_path, qas, context, version="v2.0"):
    doc = {
        "version": version,
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
    }
    return write(tmp_path / "squad.json", json.dumps(doc))


def test_squad_reader_v1_v2_and_errors(tmp_path):
    context = "Normandy is a région in France."
    path = squad_file(
        tmp_path,
        [
            {"id": "q1", "question": "Where?", "answers": [{"text": "France", "answer_start": 24}]},
            {
                "id": "q2",
                "question": "Who?",
                "answers": [],
                "is_impossible": True,
                "plausible_answers": [{"text": "Normandy", "answer_start": 0}],
            },
            {"id": "q3", "question": "Test question without answers"},
        ],
        context,
    )
    q1, q2, q3 = squad.read_squad(path)
    assert q1 == squad.QAExample("q1", "Where?", context, (("France", 24),), False)
    assert q2.is_impossible and q2.answers == ()
    assert (
        q3.answers == () and squad.gold_answers(q2) == [] and squad.gold_answers(q1) == ["France"]
    )
    with pytest.raises(encode.FormatError, match="missing or bad field 'question'"):
        squad.read_squad(squad_file(tmp_path, [{"id": "q", "answers": []}], "c"))
    with pytest.raises(encode.FormatError, match="not JSON"):
        squad.read_squad(write(tmp_path / "x.json", "{"))


@pytest.mark.parametrize(
    "data, message",
    [
        ([["not an article"]], "article 0: missing or bad field 'paragraphs': missing"),
        ([{"paragraphs": None}], "missing or bad field 'paragraphs': a NoneType, not a list"),
        (
            [{"title": "T", "paragraphs": [{"context": None, "qas": []}]}],
            "'T' paragraph 0: .*'context'",
        ),
        ([{"paragraphs": [{"context": "c", "qas": {"id": "q"}}]}], "'qas': a dict, not a list"),
        ([{"paragraphs": [{"context": "c", "qas": ["q"]}]}], "missing \\(in a str\\)"),
        (
            [{"paragraphs": [{"context": "c", "qas": [{"id": "q", "question": 5}]}]}],
            "'question': a int",
        ),
        (
            [
                {
                    "paragraphs": [
                        {
                            "context": "c",
                            "qas": [
                                {
                                    "id": "q",
                                    "question": "?",
                                    "answers": [{"text": None, "answer_start": 0}],
                                }
                            ],
                        }
                    ]
                }
            ],
            "'text': a NoneType, not a str",
        ),
        (
            [
                {
                    "paragraphs": [
                        {
                            "context": "c",
                            "qas": [
                                {"id": 7, "question": "a?"},
                                {"id": "8", "question": "b?"},
                                {"id": "7", "question": "c?"},
                            ],
                        }
                    ]
                }
            ],
            "question id '7' appears 2 times",
        ),
        (
            [
                {
                    "paragraphs": [
                        {
                            "context": "c",
                            "qas": [{"id": "q", "question": "?", "is_impossible": "false"}],
                        }
                    ]
                }
            ],
            "'is_impossible': a str, not a bool",
        ),
    ],
)
def test_squad_reader_names_a_field_of_the_wrong_type_or_a_repeated_id(tmp_path, data, message):
    """A null or a number where SQuAD has text or a list is the file's mistake, one FormatError
    naming the field (not a TypeError in the tokenizer); a repeated question id would drop
    questions from the predictions and the scores (both keyed by id)."""
    path = write(tmp_path / "bad.json", json.dumps({"data": data}))
    with pytest.raises(encode.FormatError, match=message):
        squad.read_squad(path)


def test_squad_answers_null_is_no_answers(tmp_path):
    doc = {
        "data": [
            {
                "paragraphs": [
                    {"context": "c", "qas": [{"id": "q", "question": "?", "answers": None}]}
                ]
            }
        ]
    }
    (ex,) = squad.read_squad(write(tmp_path / "null.json", json.dumps(doc)))
    assert ex.answers == ()


def test_context_pieces_keep_character_spans(tok):
    context = "The Normans gave their name to Normandy, a région in France in the 1990s."
    ctx = squad.tokenize_context(tok, context)
    assert ctx.ids == tok.encode(context)  # the same ids as tokenizing the whole text
    spans = {
        tok.inv_vocab[i] + f"@{s}": context[s:e] for i, s, e in zip(ctx.ids, ctx.starts, ctx.ends)
    }
    assert spans["norman@4"] == "Norman" and spans["##s@10"] == "s"
    assert spans["region@43"] == "région" and spans[",@39"] == ","


def test_squad_windows_labels_and_max_context(tok):
    words = [f"w{i}" for i in range(30)]
    context = " ".join(words)  # each "wN" is 2 pieces: w ##N
    start = context.index("w20")
    ex = squad.QAExample("q", "where", context, (("w20 w21", start),))
    # question 1 piece, so 16 - 1 - 3 = 12 context pieces per window, stride 5
    arrays, windows, contexts = squad.encode_squad(tok, [ex], 16, 5, 8, is_training=True)
    n_pieces = len(contexts[0].ids)
    assert n_pieces == 60
    # Windows start every 5 pieces until one reaches the end: 0, 5, ..., 50 (50 + 10 = 60).
    assert [w.doc_start for w in windows] == list(range(0, 55, 5))
    assert [w.length for w in windows] == [12] * 10 + [10]
    # Labels only in the windows that hold the whole answer ("w ##20 w ##21", pieces 40-43).
    first, last = squad._answer_pieces(contexts[0], start, start + len("w20 w21"))
    for w, window in enumerate(windows):
        s, e = arrays[squad.START_POSITIONS][w], arrays[squad.END_POSITIONS][w]
        inside = window.doc_start <= first and last < window.doc_start + window.length
        if inside:
            assert (s, e) == (
                first - window.doc_start + window.offset,
                last - window.doc_start + window.offset,
            )
            ids = arrays[F.INPUT_IDS][w]
            assert tok.convert_ids_to_tokens(ids[s : e + 1]) == tok.convert_ids_to_tokens(
                tok.encode("w20 w21")
            )
        else:
            assert (s, e) == (0, 0)
    # Every context piece has its max context in exactly one window.
    owners = np.zeros(n_pieces, int)
    for window in windows:
        owners[window.doc_start : window.doc_start + window.length] += window.max_context
    assert owners.tolist() == [1] * n_pieces
    assert arrays[F.SEGMENT_IDS][0].tolist() == [0, 0, 0] + [1] * 13


def _max_context_every_window(spans, span_index, position):
    """run_squad.py's _check_is_max_context as written: every window looked at."""
    best, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best is None or score > best:
                best, best_index = score, i
    return best_index == span_index


def test_squad_max_context_as_run_squad_in_linear_time(tok):
    """Each piece's max-context window was found by looking at every window: a 640 kB context
    (1,249 windows) took 42 s; only the windows holding the piece are looked at now, with the
    same answer as run_squad.py's rule on generated window layouts (10 s leaves room for a loaded
    machine)."""
    rng = random.Random(0)
    for _ in range(300):
        n, max_doc = rng.randrange(1, 80), rng.randrange(1, 20)
        stride = rng.randrange(1, max_doc + 3)
        spans, start = [], 0
        while start < n or not spans:  # encode_squad's windows
            length = min(n - start, max_doc)
            spans.append((start, length))
            if start + length >= n:
                break
            start += min(length, stride)
        for s_i, (doc_start, length) in enumerate(spans):
            for position in range(doc_start, doc_start + length):
                want = _max_context_every_window(spans, s_i, position)
                assert squad._max_context(spans, s_i, position) == want, (spans, s_i, position)
    ex = squad.QAExample("q", "where", "the " * 160_000, ())
    begin = time.perf_counter()
    _, windows, contexts = squad.encode_squad(tok, [ex], 384, 128, 64, is_training=False)
    assert time.perf_counter() - begin < 10 and len(windows) == 1249
    owners = np.zeros(len(contexts[0].ids), int)
    for window in windows:
        owners[window.doc_start : window.doc_start + window.length] += window.max_context
    assert owners.min() == owners.max() == 1


def test_best_answers_maps_back_to_original_text(tok):
    context = "Ünïcödé café: the Eiffel Tower, Paris."
    ex = squad.QAExample("q", "what", context, ())
    arrays, windows, contexts = squad.encode_squad(tok, [ex], 32, 8, 8, is_training=False)
    pieces = tok.convert_ids_to_tokens(arrays[F.INPUT_IDS][0])
    s_pos, e_pos = pieces.index("e"), pieces.index("tower")  # "e ##iff ##el tower"
    start = np.full((1, 32), -5.0)
    end = np.full((1, 32), -5.0)
    start[0, s_pos], end[0, e_pos] = 3.0, 2.0
    answers, nulls = squad.best_answers([ex], windows, contexts, start, end)
    assert answers == {"q": "Eiffel Tower"} and nulls == {}
    # v2.0: a stronger [CLS] score means no answer; the odds are null minus best span score.
    start[0, 0], end[0, 0] = 4.0, 4.0
    answers, nulls = squad.best_answers(
        [ex], windows, contexts, start, end, version_2_with_negative=True
    )
    assert answers == {"q": ""} and nulls["q"] == pytest.approx(8.0 - 5.0)
    # End before start, or longer than max_answer_length, is never chosen.
    start[0, 0], end[0, 0] = -5.0, -5.0
    answers, _ = squad.best_answers([ex], windows, contexts, start, end, max_answer_length=1)
    assert answers["q"] != "Eiffel Tower"
    assert pieces[0] == "[CLS]" and "ünïcödé" not in pieces


def test_training_questions_with_misplaced_answers_are_dropped(tok):
    ex_ok = squad.QAExample("a", "q", "one two three", (("two", 4),))
    ex_bad = squad.QAExample("b", "q", "one two three", (("four", 4),))
    impossible = squad.QAExample("c", "q", "one two three", (), is_impossible=True)
    arrays, windows, _ = squad.encode_squad(
        tok, [ex_ok, ex_bad, impossible], 16, 8, 4, is_training=True
    )
    assert [w.example_index for w in windows] == [0, 2]
    assert arrays[squad.START_POSITIONS].tolist()[1] == 0
    with pytest.raises(encode.FormatError, match="has no answer and is not marked"):
        squad.encode_squad(tok, [squad.QAExample("d", "q", "x", ())], 16, 8, 4, is_training=True)


# --- Prediction files ------------------------------------------------------------------------


def test_prediction_writers(tmp_path):
    examples = [glue.TextExample("7", "a", None, None), glue.TextExample("9", "b", None, None)]
    glue.write_predictions(str(tmp_path / "p" / "glue.tsv"), examples, ["entailment", "neutral"])
    assert (
        tmp_path / "p" / "glue.tsv"
    ).read_text() == "index\tprediction\n7\tentailment\n9\tneutral\n"
    glue.write_predictions(str(tmp_path / "stsb.tsv"), examples, [3.14159, 0.5])
    assert (tmp_path / "stsb.tsv").read_text().splitlines()[1:] == ["7\t3.1416", "9\t0.5000"]
    with pytest.raises(ValueError, match="2 examples but 1 predictions"):
        glue.write_predictions(str(tmp_path / "x.tsv"), examples, ["a"])

    sentences = [
        tasks.TaggedSentence("s1", ("EU", "rejects"), ("B-ORG", "O")),
        tasks.TaggedSentence("s2", ("Peter",), ("B-PER",)),
    ]
    path = str(tmp_path / "tasks.txt")
    tasks.write_conll(path, sentences, [["B-ORG", "B-MISC"], ["B-PER"]])
    assert open(path).read() == "EU B-ORG B-ORG\nrejects O B-MISC\n\nPeter B-PER B-PER\n\n"
    assert [s.tags for s in tasks.read_conll(path)] == [
        ("B-ORG", "B-MISC"),
        ("B-PER",),
    ]  # conlleval input

    squad.write_predictions(
        str(tmp_path / "squad.json"), {"q1": "Paris", "q2": ""}, {"q1": -3.0, "q2": 2.0}
    )
    assert json.loads((tmp_path / "squad.json").read_text()) == {"q1": "Paris", "q2": ""}
    assert json.loads((tmp_path / "squad_null_odds.json").read_text()) == {"q1": -3.0, "q2": 2.0}


def test_conll_columns_split_at_spaces_and_tabs_only(tmp_path):
    """Columns are separated by ASCII spaces and tabs (conlleval's and the usual readers'
    rule): a word holding a no-break, thin or ideographic space (or U+2028, NEL) is one word, not
    a word cut short (and, on the first line of a words-only file, not taken for a tag column)."""
    words = ["10\u00a0000", "Tokyo\u3000Tower", "a\u2009b", "x\u2028y", "p\x85q", "é"]
    tagged = write(
        tmp_path / "tagged.txt",
        "".join(f"{w}\tNN O\r\n" for w in words) + "\n" + "z O\n",
    )
    first, second = tasks.read_conll(tagged)
    assert first.words == tuple(words) and first.tags == ("O",) * len(words)
    assert (second.words, second.tags) == (("z",), ("O",))
    (only,) = tasks.read_conll(write(tmp_path / "words.txt", "".join(w + "\n" for w in words)))
    assert (only.words, only.tags) == (tuple(words), None)


def test_conll_byte_order_mark_is_not_text(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf-DOCSTART- -X- -X- O\n\nEU NNP B-ORG\n")
    (sentence,) = tasks.read_conll(str(path))
    assert (sentence.words, sentence.tags) == (("EU",), ("B-ORG",))


def test_squad_byte_order_mark_is_not_text(tmp_path):
    doc = {"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "q", "question": "?"}]}]}]}
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    assert [ex.qid for ex in squad.read_squad(str(path))] == ["q"]
