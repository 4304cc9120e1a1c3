"""SentencePieceTokenizer against `sentencepiece` itself on every Unicode code point.

Models are trained here by data_prep.vocab (uncased: the nmt_nfkc_cf normalization, which
case-folds), on pydocs and the odd-Unicode corpus. Each code point but the surrogates is tried
alone, inside a word and between words; our encode and encode_batch must give the processor's ids
for the text, lower-cased with str.lower first when do_lower_case (as the tokenizer documents).
"""

import itertools
import unicodedata

import numpy as np
import pytest
import sentencepiece as spm

from bert_jax.text import tokenization
from data_prep import vocab
from support import unicode_sample

CONTEXTS = ("{}", "ab{}cd", "ab {} cd")


@pytest.fixture(scope="module")
def models(testdata, tmp_path_factory):
    work = tmp_path_factory.mktemp("sp")
    corpus = [str(testdata / "pydocs_small.txt"), str(testdata / "odd_unicode.txt")]
    return {
        lower: vocab.train_sentencepiece(
            vocab.Corpus(corpus), str(work / f"lower{lower}"), 800, lower
        )
        for lower in (True, False)
    }


@pytest.fixture(scope="module")
def code_points(models):
    piece_chars = set()
    for model in models.values():
        processor = spm.SentencePieceProcessor(model_file=model)
        piece_chars.update(*(processor.id_to_piece(i) for i in range(processor.get_piece_size())))

    def kind(cp):
        ch = chr(cp)
        return (
            unicodedata.category(ch),
            ch.lower() != ch,
            ch.casefold() != ch,
            unicodedata.normalize("NFKC", ch) != ch,
            unicodedata.normalize("NFKC", ch.casefold()) != ch.casefold(),
            unicodedata.combining(ch) > 0,
            ch.isspace(),
            ch in piece_chars,
        )

    return unicode_sample.sample(kind)


@pytest.mark.parametrize(
    "model_lower, do_lower_case",
    [(True, True), (False, False), (False, True)],
    ids=["uncased model", "cased model", "cased model, lower-cased text"],
)
def test_every_code_point_matches_sentencepiece(models, code_points, model_lower, do_lower_case):
    ours = tokenization.SentencePieceTokenizer(models[model_lower], do_lower_case=do_lower_case)
    processor = spm.SentencePieceProcessor(model_file=models[model_lower])
    # An uncased model case-folds by itself; with a cased one, do_lower_case means str.lower.
    lower_first = do_lower_case and not model_lower
    for context in CONTEXTS:
        lines = [context.format(chr(cp)) for cp in code_points]
        expected = processor.encode(
            [line.lower() for line in lines] if lower_first else lines, out_type=int
        )
        ids, per_line = ours.encode_batch(lines)
        lengths = np.array([len(e) for e in expected])
        wrong = np.flatnonzero(per_line != lengths)
        assert not len(wrong), [hex(code_points[i]) for i in wrong[:20]]
        assert ids.tolist() == list(itertools.chain.from_iterable(expected)), context
        for index in range(0, len(code_points), 97):  # encode is the same call: a sample
            assert ours.encode(lines[index]) == expected[index], hex(code_points[index])


def test_uncased_model_is_not_lower_cased_twice(models):
    """str.lower before the model's own case folding changed U+0130 (İ) into "i" and U+0307."""
    ours = tokenization.SentencePieceTokenizer(models[True], do_lower_case=True)
    processor = spm.SentencePieceProcessor(model_file=models[True])
    assert ours.encode("ab\u0130cd") == processor.encode("ab\u0130cd")
    assert ours.tokenize("ABC") == processor.encode("abc", out_type=str)
