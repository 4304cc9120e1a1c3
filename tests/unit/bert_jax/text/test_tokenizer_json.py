"""Hugging Face tokenizer.json files behind our tokenizer interface: the library's ids exactly on a
sweep of texts, the file's special tokens, and whole-word masking's word boundaries against the
library's own word_ids (tokenizer files made from the bundled corpus: support/tokenizer_files.py).
"""

import json
import unicodedata

import numpy as np
import pytest
import tokenizers

from bert_jax import cli, storage
from bert_jax.data.contract import manifest
from bert_jax.data.input import masking
from bert_jax.text import tokenization, tokenizer_json
from support import tokenizer_files, unicode_sample

SPECIAL = {  # what each file defines, as its author wrote it
    "bpe": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"},
    "roberta": {"cls": "<s>", "sep": "</s>", "mask": "<mask>", "pad": "<pad>", "unk": "<unk>"},
    "unigram": {"cls": "<s>", "sep": "</s>", "mask": "<mask>", "pad": "<pad>", "unk": "<unk>"},
    "wordpiece": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"},
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokenizers")
    return {
        kind: tokenizer_files.make(kind, d / f"{kind}.json")
        for kind in (*tokenizer_files.KINDS, "plain")
    }


def _unicode_texts() -> list[str]:
    """The every-code-point sample (one code point of each run of neighbours of one category),
    as lines of 40 code points run together and as lines of them separated by spaces."""
    points = unicode_sample.sample(lambda cp: unicodedata.category(chr(cp)))
    chunks = [points[i : i + 40] for i in range(0, len(points), 40)]
    return ["".join(map(chr, c)) for c in chunks] + [" ".join(map(chr, c)) for c in chunks]


@pytest.fixture(scope="module")
def texts(testdata):
    odd = (testdata / "odd_unicode.txt").read_text(encoding="utf-8").split("\n")
    return [*tokenizer_files.corpus_lines(), *odd, *_unicode_texts(), "", " ", "[MASK] x <mask>"]


@pytest.mark.parametrize("kind", tokenizer_files.KINDS)
def test_our_ids_are_the_librarys_on_a_sweep_of_texts(files, texts, kind):
    ours = tokenization.make_tokenizer(files[kind])
    theirs = tokenizers.Tokenizer.from_file(files[kind])
    assert isinstance(ours, tokenizer_json.JsonTokenizer)
    mismatched = [
        t for t in texts if ours.encode(t) != theirs.encode(t, add_special_tokens=False).ids
    ]
    assert not mismatched, mismatched[:3]
    ids, per_line = ours.encode_batch(texts)
    want = [theirs.encode(t, add_special_tokens=False).ids for t in texts]
    assert per_line.tolist() == [len(w) for w in want]
    assert ids.tolist() == [i for w in want for i in w]
    assert ours.tokenize(texts[0]) == theirs.encode(texts[0], add_special_tokens=False).tokens


@pytest.mark.parametrize("kind", tokenizer_files.KINDS)
def test_special_tokens_are_the_files_and_go_into_the_manifest(files, texts, kind):
    ours = tokenization.make_tokenizer(files[kind])
    assert ours.special_tokens == SPECIAL[kind]
    theirs = tokenizers.Tokenizer.from_file(files[kind])
    if kind != "wordpiece":  # the others have a post-processor: ours puts [CLS]/[SEP] where it does
        for text in texts[:200]:
            assert [ours.cls_id, *ours.encode(text), ours.sep_id] == theirs.encode(text).ids
    entry = manifest.vocab_entry(ours)
    assert entry["kind"] == "tokenizer_json" and entry["special_tokens"] == SPECIAL[kind]
    assert entry["special_ids"] == {
        role: theirs.token_to_id(token) for role, token in SPECIAL[kind].items()
    }
    assert entry["size"] == theirs.get_vocab_size() and entry["md5"] == storage.md5(files[kind])
    assert entry["do_lower_case"] is (kind == "wordpiece")  # the file's normalizer says


def _word_starts(tok, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ours, the library's): whether each piece after the first of a line starts a word."""
    library = tokenizers.Tokenizer.from_file(tok.vocab_file)
    vocab = masking.Vocab.from_tokenizer(tok)
    ours, theirs = [], []
    for text in lines:
        encoding = library.encode(text, add_special_tokens=False)
        ids = np.asarray([[tok.cls_id, *encoding.ids, tok.sep_id]])
        ours.append(~vocab.continues(ids)[0, 2:-1])
        words = np.asarray([-1 if w is None else w for w in encoding.word_ids])
        theirs.append(words[1:] != words[:-1])
    return np.concatenate(ours), np.concatenate(theirs)


@pytest.mark.parametrize("kind", tokenizer_files.KINDS)
def test_word_starts_follow_the_pre_tokenizer(files, texts, kind):
    """Whole-word masking's words, from the ids alone, against the library's word_ids: exact for
    "##" and "▁" marks; for byte-level BPE a rule on the pieces' characters (tokenizer_json's
    docstring) that differs on contractions after punctuation and on characters split between
    pieces."""
    tok = tokenization.make_tokenizer(files[kind])
    prose = list(tokenizer_files.corpus_lines())
    spaced = _unicode_texts()[len(_unicode_texts()) // 2 :]
    for name, lines, floor in (("prose", prose, 0.999), ("spaced unicode", spaced, 0.999)):
        ours, theirs = _word_starts(tok, lines)
        agree = float((ours == theirs).mean())
        if tok.word_marks in ("prefix", "metaspace"):
            assert agree == 1.0, (name, kind)
        assert agree >= floor, (name, kind, agree)


def test_whole_word_masking_masks_words_whole(files):
    """On byte-level BPE rows, every word (by the library's word_ids) is masked whole or not at
    all, but for the few where the id rule and the pre-tokenizer differ."""
    tok = tokenization.make_tokenizer(files["bpe"])
    vocab = masking.Vocab.from_tokenizer(tok)
    theirs = tokenizers.Tokenizer.from_file(files["bpe"])
    lines = [line for line in tokenizer_files.corpus_lines() if len(line) > 40][:400]
    encodings = [theirs.encode(line, add_special_tokens=False) for line in lines]
    length = max(len(e.ids) for e in encodings) + 2
    tokens = np.zeros((len(lines), length), np.int32)
    for row, e in enumerate(encodings):
        tokens[row, : len(e.ids) + 2] = [tok.cls_id, *e.ids, tok.sep_id]
    lengths = np.asarray([len(e.ids) + 2 for e in encodings])
    opts = masking.Options(max_predictions_per_seq=length, masked_lm_prob=0.3, whole_word_mask=True)
    out = masking.mask(tokens, lengths, opts, vocab, np.random.default_rng(0))
    split = words = 0
    for row, e in enumerate(encodings):
        chosen = set(out.positions[row, : out.num_masked[row]].tolist())
        word_of = np.asarray([w for w in e.word_ids])
        for w in set(word_of.tolist()):
            where = {int(p) + 1 for p in np.flatnonzero(word_of == w)}
            words += 1
            split += 0 < len(where & chosen) < len(where)
    assert out.num_masked.sum() >= 0.25 * (lengths - 2).sum()
    assert split <= 0.002 * words, (split, words)


def test_a_file_without_word_marks_refuses_whole_word_masking(files):
    tok = tokenization.make_tokenizer(files["plain"])
    assert tok.word_marks is None
    vocab = masking.Vocab.from_tokenizer(tok)
    vocab.check_whole_word(False)  # masking piece by piece is fine
    with pytest.raises(cli.UserError, match="marks none"):
        vocab.check_whole_word(True, "plain.json")


def test_a_file_without_a_mask_token_is_one_error(tmp_path, files):
    spec = json.loads(open(files["roberta"], encoding="utf-8").read())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "<mask>"]
    del spec["model"]["vocab"]["<mask>"]
    path = tmp_path / "no_mask.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(tokenization.VocabError, match=r"no mask \(\[MASK\] or <mask>\)"):
        tokenization.make_tokenizer(str(path))
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(tokenization.VocabError, match=r"not a Hugging Face tokenizer\.json"):
        tokenization.make_tokenizer(str(tmp_path / "bad.json"))


def test_truncation_and_padding_in_the_file_are_ignored(tmp_path, files):
    theirs = tokenizers.Tokenizer.from_file(files["bpe"])
    theirs.enable_truncation(8)
    theirs.enable_padding(length=64)
    theirs.save(str(tmp_path / "cut.json"))
    ours = tokenization.make_tokenizer(str(tmp_path / "cut.json"))
    text = " ".join(tokenizer_files.corpus_lines()[:3])
    assert len(ours.encode(text)) > 64
    assert ours.encode(text) == tokenization.make_tokenizer(files["bpe"]).encode(text)


def test_a_space_and_the_first_bytes_of_a_letter_start_a_word(tmp_path):
    """Byte-level BPE merges " " with the first bytes of 4-byte characters ("ĠðĲĲ": a space and
    most of a Deseret letter) when the characters are many and each rare. Such a piece starts a
    word (` ?\\p{L}+`), as one with the whole letter does; it was taken for a run of whitespace
    continuing the word before, so whole-word masking joined words of supplementary-plane text
    (and reference mode, which looked at continuation pieces alone, made whole lines one word)."""
    import random

    from bert_jax.text import tokenizer_json
    from data_prep import vocab as vocab_lib

    rng = random.Random(0)
    letters = [chr(c) for c in range(0x10400, 0x10450)]
    lines = [
        " ".join(rng.choice(letters) + rng.choice(letters) for _ in range(30)) for _ in range(99)
    ]
    tok = tokenization.make_tokenizer(
        vocab_lib.train_bpe(lines, str(tmp_path / "t.json"), 280, False)
    )
    partial = [t for t in tok.vocab if (tokenizer_json._byte_text(t) or b"")[:2] == b" \xf0"]
    assert partial and not any(tok.is_continuation(t) for t in partial)
    text = "\U00010400\U00010401 \U00010402\U00010403 \U00010404\U00010405"
    ours, theirs = _word_starts(tok, [text])
    assert (ours == theirs).all(), tok.convert_ids_to_tokens(tok.encode(text))


def _no_unknown(kind: str) -> tokenizers.Tokenizer:
    from tokenizers import models, pre_tokenizers

    special = {"[CLS]": 0, "[SEP]": 1, "[MASK]": 2}
    if kind == "WordPiece":
        model = models.WordPiece({**special, "hello": 3, "##s": 4}, unk_token="[UNK]")
    elif kind == "WordLevel":
        model = models.WordLevel({**special, "hello": 3}, unk_token="[UNK]")
    elif kind == "BPE":
        model = models.BPE({**special, "h": 3, "e": 4, "he": 5}, [("h", "e")], unk_token="[UNK]")
    else:
        pieces = [("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0), ("▁hello", -1.0), ("▁", -2.0)]
        model = models.Unigram(pieces, None)
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = (
        pre_tokenizers.Metaspace() if kind == "Unigram" else pre_tokenizers.Whitespace()
    )
    return tok


@pytest.mark.parametrize("kind", ["WordPiece", "WordLevel", "BPE", "Unigram"])
def test_a_model_without_its_unknown_token_is_one_error(tmp_path, kind):
    """The library raises on the first character outside such a vocabulary (a traceback from a
    data_prep worker); the file is refused when read, naming what is missing."""
    tok = _no_unknown(kind)
    with pytest.raises(Exception, match=r"(?i)unk"):
        tok.encode("zebra ☃", add_special_tokens=False)
    path = str(tmp_path / "no_unk.json")
    tok.save(path)
    with pytest.raises(tokenization.VocabError, match=rf"its {kind} model has .*unk"):
        tokenization.make_tokenizer(path)


def test_a_bpe_that_falls_back_to_bytes_needs_no_unknown_token(tmp_path):
    from tokenizers import models, pre_tokenizers

    pieces = {f"<0x{b:02X}>": 5 + b for b in range(256)}
    vocab = {"[CLS]": 0, "[SEP]": 1, "[MASK]": 2, "h": 3, "e": 4, **pieces}
    theirs = tokenizers.Tokenizer(models.BPE(vocab, [], unk_token="[UNK]", byte_fallback=True))
    theirs.pre_tokenizer = pre_tokenizers.Whitespace()
    theirs.save(str(tmp_path / "bytes.json"))
    ours = tokenization.make_tokenizer(str(tmp_path / "bytes.json"))
    for text in ("he", "zebra ☃ 𝔘", " \t"):
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("kind", ["unigram", "wordpiece"])
def test_an_added_token_inside_a_word_is_a_word_of_its_own(tmp_path, files, kind):
    """The library cuts the text at added tokens before its model runs ("▁h" "ello" for "hello"
    with "ello" added), and its word_ids make each one a word: whole-word masking's words are
    still exactly the library's for "▁" and "##" marks."""
    theirs = tokenizers.Tokenizer.from_file(files[kind])
    theirs.add_tokens(["ello", "ing", tokenizers.AddedToken("the", single_word=True)])
    path = str(tmp_path / "added.json")
    theirs.save(path)
    tok = tokenization.make_tokenizer(path)
    lines = [line for line in tokenizer_files.corpus_lines() if "ello" in line or "ing" in line]
    lines += ["hello helloing xellox the other", "singing bellow"]
    ours, library = _word_starts(tok, lines)
    assert len(ours) > 1000 and (ours == library).all()


def _llama_style(path, twin=None) -> str:
    """Llama-2's tokenizer.json layout: no pre-tokenizer, a normalizer that prepends "▁" and turns
    spaces into "▁" (its byte fallback left out). `twin`: where to save the same model with a
    Metaspace pre-tokenizer instead (the same pieces, and the library's word_ids)."""
    from tokenizers import models, normalizers, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()  # SentencePiece's "▁word" pieces
    special = ["<unk>", "<s>", "</s>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=special, show_progress=False)
    tok.train_from_iterator(tokenizer_files.corpus_lines(), trainer)
    if twin:
        tok.save(str(twin))
    tok.pre_tokenizer = None  # then the layout transformers converts Llama-2's model to
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    ends = [(t, tok.token_to_id(t)) for t in ("<s>", "</s>")]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=ends)
    tok.save(str(path))
    return str(path)


@pytest.mark.parametrize("kind", [*tokenizer_files.KINDS, "llama"])
def test_sentences_encoded_apart_are_the_documents_ids(tmp_path, files, kind):
    """data_prep encodes a document's sentences one by one, each after the first with
    sentence_joiner before it: together they are the library's ids of the sentences joined by a
    space (a BPE without a pre-tokenizer may merge across a sentence end: nearly always). A
    Llama-2-style normalizer made that space a "▁" piece of its own before every sentence."""
    path = _llama_style(tmp_path / "llama.json") if kind == "llama" else files[kind]
    tok = tokenization.make_tokenizer(path)
    theirs = tokenizers.Tokenizer.from_file(path)
    lines = list(tokenizer_files.corpus_lines())
    documents = [lines[i : i + 5] for i in range(0, min(len(lines), 400), 5)]
    same = []
    for document in documents:
        ours = tok.encode(document[0])
        for sentence in document[1:]:
            ours += tok.encode(tok.sentence_joiner + sentence)
        same.append(ours == theirs.encode(" ".join(document), add_special_tokens=False).ids)
    assert np.mean(same) >= (0.9 if kind == "llama" else 1.0), np.mean(same)


def test_a_llama_style_file_marks_words_with_its_spaces(tmp_path):
    """No pre-tokenizer, spaces turned into "▁" by the normalizer: whole-word masking takes its
    "▁" pieces as word starts (it was refused as a file whose pieces "mark no words"), the words
    of the same model behind a Metaspace pre-tokenizer, exactly the library's there."""
    path = _llama_style(tmp_path / "llama.json", twin=tmp_path / "twin.json")
    tok, twin = (
        tokenization.make_tokenizer(str(tmp_path / n)) for n in ("llama.json", "twin.json")
    )
    assert tok.word_marks == "metaspace"
    masking.Vocab.from_tokenizer(tok).check_whole_word(True, path)
    lines = [*tokenizer_files.corpus_lines()[:300], *_unicode_texts()[-20:]]
    lines = [line for line in lines if tok.encode(line) == twin.encode(line)]
    ours, library = _word_starts(tok, lines)[0], _word_starts(twin, lines)[1]
    assert len(lines) >= 250 and (ours == library).all()
