"""WordPiece ids must equal google-research/bert's FullTokenizer; SentencePiece must round-trip."""

import random

import pytest

from bert_jax.text import tokenization


@pytest.fixture(scope="module")
def tok(vocab_file):
    return tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True)


@pytest.mark.parametrize(
    "text, words",
    [
        ("Hello, World!", ["hello", ",", "world", "!"]),
        ("naïve Café résumé", ["naive", "cafe", "resume"]),  # NFD then drop combining marks
        ("中文字", ["中", "文", "字"]),  # CJK characters become words of their own
        ("a\u200bb", ["ab"]),  # zero-width space is a format char (Cf): deleted, not a split
        ("x\x0by z", ["xy", "z"]),  # vertical tab is a control char: deleted, joins the word
        ("tab\tand\u3000wide\u00a0space", ["tab", "and", "wide", "space"]),  # Zs is whitespace
        ("private\ue000use", ["private\ue000use"]),  # Co (and Cn) stay: not control characters
        (
            "$5 ^_^ `x`",
            ["$", "5", "^", "_", "^", "`", "x", "`"],
        ),  # ASCII symbols count as punctuation
        ("bad\ufffdbyte\x00", ["badbyte"]),
        ("", []),
    ],
)
def test_basic_tokenizer_rules(tok, text, words):
    assert tokenization.basic_tokenize(text, do_lower_case=True) == words
    pieces = [p for w in words for p in tok.tokenize(w)]
    assert tok.tokenize(text) == pieces
    assert tok.encode(text) == tok.convert_tokens_to_ids(pieces)


def test_wordpiece_greedy_longest_match(tok):
    assert tok.tokenize("unaffable") == ["una", "##ffa", "##ble"]
    assert tok.encode("unaffable") == [14477, 20961, 3468]  # ids in bert-base-uncased
    # A snowman is a symbol, not punctuation, so it stays inside the word, and a word with any
    # uncovered character is one [UNK] as a whole.
    assert tok.tokenize("snow\u2603man is cold") == ["[UNK]", "is", "cold"]


def test_word_length_limit_is_200_characters(tok):
    assert tok.tokenize("a" * 201) == ["[UNK]"]
    assert "[UNK]" not in tok.tokenize("a" * 200)


def test_cased_tokenizer_keeps_case_and_accents(vocab_file):
    cased = tokenization.WordPieceTokenizer(vocab_file, do_lower_case=False)
    assert tokenization.basic_tokenize("Hello café", do_lower_case=False) == ["Hello", "café"]
    # The uncased vocabulary has no capitals, so a cased word is unknown.
    assert cased.tokenize("Hello cafe") == ["[UNK]", "cafe"]


def test_cached_encode_equals_uncached_on_corpus_and_odd_unicode(tok, testdata):
    lines = (testdata / "pydocs_small.txt").read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    alphabet = "aZé中\u200b\u0301\x0b\x1c\x85\u2028\u00a0\ue000 ,.!-#\t" + "".join(
        chr(c) for c in range(0x370, 0x380)
    )
    odd = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    for line in lines[:3000] + odd:
        assert tok.encode(line) == tok.convert_tokens_to_ids(tok.tokenize(line)), repr(line)


def test_matches_independent_hf_wordpiece_on_prose(tok, vocab_file, testdata):
    """Hugging Face's Rust BertWordPiece implementation agrees with ours on real prose."""
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.BertWordPieceTokenizer(vocab_file, lowercase=True)
    lines = [
        text
        for text in (testdata / "pydocs_small.txt").read_text(encoding="utf-8").splitlines()
        if text
    ][:4000]
    for line, encoding in zip(lines, hf.encode_batch(lines, add_special_tokens=False)):
        assert tok.encode(line) == encoding.ids, line


@pytest.mark.parametrize(
    "content, complaint",
    [
        ("[PAD]\nhello\n", "lacks the special tokens"),
        (None, "does not exist"),
    ],
)
def test_bad_vocabulary_says_what_is_wrong(tmp_path, content, complaint):
    path = tmp_path / "vocab.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(tokenization.VocabError, match=complaint):
        tokenization.WordPieceTokenizer(str(path))


def test_binary_vocabulary_is_rejected(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(tokenization.VocabError, match="not UTF-8"):
        tokenization.load_vocab(str(path))


def test_sentencepiece_tokenizer(tmp_path, testdata):
    from data_prep import vocab

    model = vocab.train_sentencepiece(
        vocab.Corpus([str(testdata / "pydocs_small.txt")]),
        str(tmp_path / "sp"),
        1000,
        True,
    )
    sp = tokenization.make_tokenizer(model, do_lower_case=True)
    assert isinstance(sp, tokenization.SentencePieceTokenizer)
    ids = sp.encode("The interpreter reads a line.")
    assert ids and all(0 <= i < sp.vocab_size for i in ids)
    assert (
        "".join(sp.convert_ids_to_tokens(ids)).replace("\u2581", " ").strip()
        == "the interpreter reads a line."
    )
    assert {sp.cls_id, sp.sep_id, sp.mask_id} <= set(range(sp.vocab_size))
    assert sp.is_continuation("ing") and not sp.is_continuation("\u2581the")


def test_sentencepiece_model_without_bert_symbols_is_rejected(tmp_path, testdata):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(testdata / "sample_text.txt"),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=100,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(tokenization.VocabError, match="lacks"):
        tokenization.SentencePieceTokenizer(str(tmp_path / "plain.model"))
