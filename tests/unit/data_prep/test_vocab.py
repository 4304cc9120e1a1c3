"""data_prep.vocab gives the same files from the same corpus and flags, byte for byte, in
separate processes (each with its own hash seeds, as reruns or several hosts preparing one data
set): Hugging Face's WordPiece trainer numbers its ## characters in per-process hash order, and
a SentencePiece .model trained to a file records that file's path."""

import os
import subprocess
import sys

import pytest

from bert_jax import cli
from bert_jax.text import tokenization
from data_prep import vocab

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
TESTDATA = os.path.join(ROOT, "data_prep", "testdata")
CORPUS = os.path.join(TESTDATA, "sample_text.txt")

# output name per kind, extra flags, the files it writes
KINDS = {
    "wordpiece": ("vocab.txt", [], ["vocab.txt"]),
    "bpe": ("tokenizer.json", ["--vocab_size=400"], ["tokenizer.json"]),
    "sentencepiece": ("sp", ["--vocab_size=200"], ["sp.model", "sp.vocab"]),
}


def _run(args: list[str], seed: int) -> None:
    env = dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def _files(directory: str, names: list[str]) -> dict[str, bytes]:
    out = {}
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_three_processes_write_identical_files(tmp_path, kind):
    output, flags, names = KINDS[kind]
    runs = []
    for seed in (1, 2, 3):  # each its own directory: the path must not reach the bytes
        out = tmp_path / f"run{seed}"
        args = [f"--input={CORPUS}", f"--output={out / output}", f"--model_type={kind}", *flags]
        _run(["-m", "data_prep.vocab", "--vocab_size=400", *args], seed)
        runs.append(_files(str(out), names))
    assert runs[0] == runs[1] == runs[2]


def test_wordpiece_alphabet_cut_in_ties_is_deterministic(tmp_path):
    """A corpus with more characters than the alphabet holds (Wikipedia has thousands): the
    characters tied in count at the cut are chosen the same way in every process."""
    corpus = [os.path.join(TESTDATA, "odd_unicode.txt"), CORPUS]
    code = (
        "import sys; from data_prep import vocab; "
        f"vocab.train_wordpiece(vocab.Corpus({corpus!r}), "
        "sys.argv[1], 600, True, limit_alphabet=60)"
    )
    runs = []
    for seed in (1, 2, 3):
        path = str(tmp_path / f"vocab{seed}.txt")
        _run(["-c", code, path], seed)
        with open(path, "rb") as f:
            runs.append(f.read())
    assert runs[0] == runs[1] == runs[2]
    pieces = runs[0].decode().splitlines()
    singles = [p for p in pieces[len(vocab.SPECIAL) :] if len(p) == 1]
    assert len(singles) == 60  # the cap holds, ties and all


def test_wordpiece_keeps_what_the_trainer_learns(tmp_path):
    """The fixed numbering changes only the order of the ## characters and the ties: the same
    specials, alphabet and size as the library's own run, and nearly all the same pieces."""
    import tokenizers

    sentences = list(vocab.Corpus([os.path.join(TESTDATA, "pydocs_small.txt")]))
    path = vocab.train_wordpiece(sentences, str(tmp_path / "vocab.txt"), 1500, True)
    ours = open(path, encoding="utf-8").read().splitlines()
    tok = tokenizers.BertWordPieceTokenizer(lowercase=True, strip_accents=True)
    tok.train_from_iterator(
        sentences, vocab_size=1500, special_tokens=vocab.SPECIAL, show_progress=False
    )
    theirs = [p for p, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    assert len(ours) == len(theirs) == 1500 and ours[:5] == vocab.SPECIAL

    def singles(pieces):  # the alphabet and its ## characters
        return {p for p in pieces if len(p) == 1 or (p.startswith("##") and len(p) == 3)}

    assert singles(ours) == singles(theirs)
    assert len(set(ours) ^ set(theirs)) <= len(theirs) // 50


def test_wordpiece_refuses_a_one_pass_iterator(tmp_path):
    with pytest.raises(TypeError, match="twice"):
        vocab.train_wordpiece(iter(["a b"]), str(tmp_path / "v.txt"), 100, True)


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.model"])
def test_a_wordpiece_vocab_is_not_written_under_another_kind_s_name(tmp_path, forkserver, name):
    """Every reader tells a tokenizer.json and a SentencePiece model from a vocab.txt by its
    name: a vocab.txt written as tok.json would be read as JSON (the trainer's own check of its
    file said so, naming the file it had just written, and left it there). One line, before
    training, and no file."""
    output = tmp_path / name
    args = [f"--input={CORPUS}", f"--output={output}", "--vocab_size=400"]
    status, stdout, stderr = forkserver.run("data_prep.vocab", args)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.startswith("error: --output=") and "vocab.txt" in stderr, stderr
    assert len(stderr.splitlines()) == 1 and not output.exists()


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece", "bpe"])
@pytest.mark.parametrize("name", [None, "new/", "new/sub/", "./", "new/.."])
def test_an_output_that_names_no_file_is_one_line_before_training(tmp_path, forkserver, kind, name):
    """--output='' or a directory to be (`out/`): the vocabulary was trained, then writing it
    was a FileNotFoundError traceback. Now one line naming the flag, before the corpus is read."""
    output = "" if name is None else f"{tmp_path}/{name}"
    args = [f"--input={CORPUS}", f"--output={output}", "--vocab_size=300", f"--model_type={kind}"]
    status, stdout, stderr = forkserver.run("data_prep.vocab", args)
    assert (status, stdout) == (2, ""), stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"error: --output={output!r} names no file;"), stderr
    assert os.listdir(tmp_path) == []


def test_a_sentencepiece_output_named_model_is_the_model_file(tmp_path, forkserver):
    """--output is the model's prefix; --output=sp.model names the model file itself (it wrote
    sp.model.model, and --vocab_file=sp.model then named no file)."""
    args = [f"--input={CORPUS}", f"--output={tmp_path / 'sp.model'}", "--vocab_size=200"]
    status, stdout, stderr = forkserver.run(
        "data_prep.vocab", [*args, "--model_type=sentencepiece"]
    )
    assert status == 0, stderr
    assert sorted(os.listdir(tmp_path)) == ["sp.model", "sp.vocab"]
    assert stdout.startswith(f"wrote {tmp_path / 'sp.model'}:")


@pytest.mark.parametrize(
    "kind, data",
    [
        ("wordpiece", b"\x00\n"),
        ("wordpiece", b"\x80\xff\n\xff\n"),
        ("wordpiece", "\u200b\u0301\ufeff\n".encode()),  # format, combining: BERT drops both
        ("sentencepiece", b"\x00\n"),
        ("sentencepiece", b"\x80\xff\n\xff\n"),
    ],
)
def test_a_corpus_whose_characters_the_normalizer_drops_is_refused(
    tmp_path, forkserver, kind, data
):
    """NULs, undecodable bytes (U+FFFD), and for WordPiece format characters and combining
    marks, alone: nothing is left to learn. WordPiece wrote a vocab.txt of the five special
    tokens (sentencepiece those and "▁") with only a warning, or sentencepiece's trainer failed
    an internal check (a RuntimeError traceback); every record made with it would be empty. As
    for an input without text: one error line, and no file."""
    corpus = tmp_path / "junk.txt"
    corpus.write_bytes(data)
    output = tmp_path / ("v.txt" if kind == "wordpiece" else "sp")
    args = [f"--input={corpus}", f"--output={output}", f"--model_type={kind}", "--vocab_size=300"]
    status, stdout, stderr = forkserver.run("data_prep.vocab", args)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.startswith("error: ") and "no text" in stderr and len(stderr.splitlines()) == 1
    assert os.listdir(tmp_path) == ["junk.txt"]


def test_sentencepiece_learns_from_sentences_longer_than_its_default_limit(tmp_path):
    """sentencepiece skips, with a log line at the level we silence, every sentence over its
    max_sentence_length (4,192 bytes by default): a corpus of paragraph-long lines (BERT-format
    text of one paragraph a line) trained on its few short lines alone, a vocabulary without the
    long lines' characters. Lines up to what the readers keep (8 MB) are learnt from."""
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    short = ["alpha beta gamma delta"] * 20
    long = [" ".join(rng.choice(["xyz", "qvw", "kjb"]) for _ in range(1500)) for _ in range(30)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(short + long) + "\n")
    prefix = str(tmp_path / "sp")
    vocab.train_sentencepiece(vocab.Corpus([str(corpus)]), prefix, 100, True)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    assert set("xyzqvwkjb") <= {c for p in pieces for c in p}, sorted(pieces)


def test_a_trained_sentencepiece_model_never_encodes_text_to_its_special_ids(tmp_path):
    """[CLS], [SEP] and [MASK] are control symbols (as ALBERT trains them): ids 2-4 exist for the
    pipeline to insert, but a corpus or an input that spells "[MASK]" out gets ordinary pieces,
    as WordPiece gives it; user-defined symbols turned the literal text into the mask id."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the model reads [MASK] and [CLS] in text\nalpha beta [SEP] gamma\n" * 50)
    vocab.train_sentencepiece(vocab.Corpus([str(corpus)]), str(tmp_path / "sp"), 80, True)
    tok = tokenization.SentencePieceTokenizer(str(tmp_path / "sp.model"), True)
    assert (tok.cls_id, tok.sep_id, tok.mask_id) == (2, 3, 4)
    ids = tok.convert_tokens_to_ids(tok.tokenize("a [MASK] b [CLS] c [SEP]"))
    assert not {tok.cls_id, tok.sep_id, tok.mask_id} & set(ids), ids


class _Interrupted:
    """Sentences whose reading stops with `error` after a few (a Ctrl-C in the input reader, an
    input error found mid-file); re-iterable, as WordPiece's two passes need."""

    def __init__(self, error: BaseException):
        self.error = error

    def __iter__(self):
        for i in range(50):
            yield f"sentence number {i} has a few words in it"
        raise self.error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), cli.UserError("input x is damaged")])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_what_stops_reading_the_corpus_reaches_the_caller_as_it_was(tmp_path, kind, error):
    """A Ctrl-C while SentencePiece read the corpus came out as its RuntimeError "INTERNAL:
    KeyboardInterrupt", which the binary reported as a bug of ours with a traceback (exit 1)."""
    output = str(tmp_path / KINDS[kind][0])
    train = {
        "wordpiece": lambda: vocab.train_wordpiece(_Interrupted(error), output, 400, True),
        "bpe": lambda: vocab.train_bpe(_Interrupted(error), output, 400, True),
        "sentencepiece": lambda: vocab.train_sentencepiece(_Interrupted(error), output, 200, True),
    }[kind]
    with pytest.raises(type(error)) as raised:
        train()
    assert raised.value is error
    assert os.listdir(tmp_path) == []


def test_a_wordpiece_vocab_covers_the_words_of_its_own_corpus(tmp_path):
    """Every word of the corpus encodes to pieces, never [UNK], with the vocabulary trained on it,
    whatever its characters. The trainer cut words by Hugging Face's BertNormalizer, which drops
    private-use characters (the original keeps them) and lower-cases a final capital sigma to σ
    (Python's str.lower, the original's, to ς): each such word was [UNK] in the records."""
    import random

    rng = random.Random(0)
    kinds = [
        "abcdefghij",
        "\ue000\uf8ff\U000f0000\U00100000",  # private use (Co)
        "ΌΣΑΣ",  # capital sigmas, final ones among them
        "\u4e00\u3400\U00020000\U0002b820\U00030000",  # CJK, the original's ranges and beyond
        "가힣\u1100\u1161",  # Hangul syllables and jamo
        "e\u0301\u0308",  # combining marks
        "\U0001f469\u200d\U0001f467",  # an emoji sequence
    ]
    sentences = [
        " ".join(
            "".join(rng.choice(rng.choice(kinds)) for _ in range(rng.randint(1, 6)))
            for _ in range(rng.randint(1, 8))
        )
        for _ in range(300)
    ]
    for lower in (True, False):
        path = vocab.train_wordpiece(sentences, str(tmp_path / f"v{lower}.txt"), 3000, lower)
        tok = tokenization.WordPieceTokenizer(path, do_lower_case=lower)
        unknown = [s for s in sentences if tok.unk_id in tok.encode(s)]
        assert not unknown, (lower, unknown[:3])
