"""Trains a vocabulary from a corpus: WordPiece (a BERT vocab.txt), SentencePiece (a .model) or
byte-level BPE (a Hugging Face tokenizer.json, as ModernBERT's and RoBERTa's).

  python -m data_prep.vocab --input=corpus.txt --output=/tmp/vocab.txt --vocab_size=8000
  python -m data_prep.vocab --input=corpus.txt --output=/tmp/sp --model_type=sentencepiece

--input is read as data_prep.main reads it (the trainers see sentences, not markup or JSON). How
each kind is trained: docs/data_prep.md, "Input" and "Hugging Face tokenizer.json".
"""

import collections
import dataclasses
import io
import re
from collections.abc import Iterable, Iterator

from absl import flags

from bert_jax import cli, storage
from bert_jax.text import tokenization
from bert_jax.text.tokenization import CLS, MASK, SEP
from data_prep import inputs, job, output, readers, sentences

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "input",
    None,
    "Inputs as data_prep.main takes them: text, JSONL, Wikipedia dumps, Parquet, tfds:NAME.",
)
flags.DEFINE_string(
    "text_field", readers.TEXT_FIELD, "Text field of JSONL records, Parquet columns and TFDS."
)
flags.DEFINE_string(
    "output",
    None,
    "vocab.txt path (wordpiece), model prefix or .model path (sentencepiece: PREFIX.model and "
    "PREFIX.vocab) or tokenizer.json path (bpe).",
)
flags.DEFINE_enum(
    "model_type",
    "wordpiece",
    ["wordpiece", "sentencepiece", "bpe"],
    "Kind of vocabulary: wordpiece (vocab.txt), sentencepiece (unigram .model), bpe (byte-level "
    "tokenizer.json).",
)
flags.DEFINE_integer("vocab_size", 30522, "Entries, special tokens included.")
flags.DEFINE_bool(
    "do_lower_case", tokenization.DO_LOWER_CASE, "Lower-case (and strip accents, for WordPiece)."
)
flags.DEFINE_string(
    "language",
    sentences.DEFAULT_LANGUAGE,
    "Sentence rules of running text, as data_prep.main's --language.",
)

SPECIAL = list(tokenization.SPECIAL_TOKENS)


@dataclasses.dataclass
class Corpus:
    """The inputs' sentences, read afresh by every iter(): WordPiece's trainer reads twice."""

    inputs: list[str]
    text_field: str = readers.TEXT_FIELD
    language: str = sentences.DEFAULT_LANGUAGE
    documents: bool = False  # each document as one text instead, its sentences joined by a space

    def __iter__(self) -> Iterator[str]:
        stats = readers.ReadStats()
        for source in readers.parse_input(self.inputs):
            for document in readers.documents(
                source, stats, self.text_field, language=self.language
            ):
                if self.documents:
                    yield " ".join(document)
                else:
                    yield from document


# A corpus whose every character the normalizer drops: every record would be empty.
_NO_TEXT = (
    "--input holds no text the vocabulary's normalizer keeps (only NULs, undecodable bytes, "
    "control or format characters, or combining marks): pass the corpus the vocabulary is for"
)


def train_wordpiece(
    sentences: Iterable[str],
    output_path: str,
    vocab_size: int,
    do_lower_case: bool,
    limit_alphabet: int = 1000,  # the trainer's default cap on single characters kept
) -> str:
    """Writes a vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4, the alphabet, the ##
    characters, then learnt pieces; byte for byte the same for the same corpus: a first pass over
    `sentences` (read twice) fixes the characters' order, which the trainer seeds per process."""
    import tokenizers

    if iter(sentences) is sentences:  # a generator: the second pass would see nothing
        raise TypeError("train_wordpiece reads the corpus twice: pass a list or a Corpus")

    def tokenizer():
        # The trainer takes the words as they come: data_prep's own BasicTokenizer cuts them.
        tok = tokenizers.BertWordPieceTokenizer(
            clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False
        )
        tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        return tok

    sentences = _BasicWords(sentences, do_lower_case)
    alphabet, continuing = _wordpiece_start(tokenizer(), sentences, limit_alphabet)
    tok = tokenizer()
    tok.train_from_iterator(
        sentences,
        vocab_size=vocab_size,
        # Registered first, they keep these ids; the alphabet's ties are broken by code point.
        special_tokens=SPECIAL + alphabet + continuing,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    vocab = tok.get_vocab()  # piece -> id, ids dense from 0
    if len(vocab) <= len(SPECIAL):
        raise cli.UserError(_NO_TEXT)
    if len(vocab) > vocab_size:  # the alphabet alone did not fit: the trainer kept it anyway
        raise cli.UserError(
            f"--vocab_size={vocab_size} is smaller than the {len(vocab)} entries this corpus "
            f"needs at least (the {len(SPECIAL)} special tokens and every character, alone and "
            f"as a ## piece); pass --vocab_size={len(vocab)} or more"
        )
    pieces = [piece for piece, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    storage.makedirs(storage.dirname(output_path))
    storage.write_text(output_path, "".join(piece + "\n" for piece in pieces))  # published whole
    return output_path


@dataclasses.dataclass
class _BasicWords:
    """Texts as the words of the original's BasicTokenizer, joined by spaces; read afresh by every
    iter(). Hugging Face's BertNormalizer drops private-use characters, which the original keeps:
    a word holding one was [UNK] with a vocabulary trained on its own corpus."""

    texts: Iterable[str]
    do_lower_case: bool

    def __iter__(self) -> Iterator[str]:
        for text in self.texts:
            yield " ".join(tokenization.basic_tokenize(text, self.do_lower_case))


def _wordpiece_start(tok, sentences: Iterable[str], limit_alphabet: int):
    """The alphabet (the `limit_alphabet` most frequent characters, ties by code point) and its
    ## characters (those inside a word), each in code-point order, from the trainer's words."""
    normalize, split = tok.normalizer.normalize_str, tok.pre_tokenizer.pre_tokenize_str
    words = collections.Counter()
    for text in sentences:
        words.update(word for word, _ in split(normalize(text)))
    chars = collections.Counter()
    inside = set()
    for word, count in words.items():
        for char in word:
            chars[char] += count
        inside.update(word[1:])
    kept = sorted(chars, key=lambda c: (-chars[c], c))[:limit_alphabet]
    alphabet = sorted(kept)
    return alphabet, ["##" + c for c in alphabet if c in inside]


def train_bpe(texts: Iterable[str], output_path: str, vocab_size: int, do_lower_case: bool) -> str:
    """Writes a byte-level BPE tokenizer.json: [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4, the 256
    byte pieces, then learnt merges; "[CLS] $A [SEP]" ("[CLS] $A [SEP] $B [SEP]" for pairs)."""
    import tokenizers
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    if do_lower_case:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    needed = len(SPECIAL) + len(alphabet)
    if vocab_size < needed:
        raise cli.UserError(
            f"--vocab_size={vocab_size} is smaller than the {needed} entries byte-level BPE needs "
            f"at least (the {len(SPECIAL)} special tokens and the 256 bytes); pass "
            f"--vocab_size={needed} or more"
        )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = tokenization.bert_post_processor(
        tok.token_to_id(CLS), tok.token_to_id(SEP)
    )
    storage.makedirs(storage.dirname(output_path))
    storage.write_text(output_path, tok.to_str(pretty=True))  # published whole
    return output_path


def train_sentencepiece(
    sentences: Iterable[str], output_prefix: str, vocab_size: int, do_lower_case: bool
) -> str:
    """Writes <prefix>.model and <prefix>.vocab (piece, tab, score); <pad>=0, <unk>=1, then [CLS]
    [SEP] [MASK]. Trained to bytes: a .model trained to a file records its path."""
    import sentencepiece as spm

    written = io.BytesIO()
    raised: list[BaseException] = []

    def feed() -> Iterator[str]:
        """The sentences; what reading them raises is kept: the trainer makes it a RuntimeError."""
        try:
            yield from sentences
        except BaseException as e:
            raised.append(e)
            raise

    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=feed(),
            model_writer=written,
            vocab_size=vocab_size,
            model_type="unigram",
            pad_id=0,
            unk_id=1,
            bos_id=-1,
            eos_id=-1,
            # Control symbols, as ALBERT's: text never encodes to them (a literal "[MASK]").
            control_symbols=[CLS, SEP, MASK],
            normalization_rule_name="nmt_nfkc_cf" if do_lower_case else "nmt_nfkc",
            # A small corpus may not support vocab_size pieces; take what it has.
            hard_vocab_limit=False,
            # Its default (4,192 bytes) quietly skips longer sentences: a paragraph a line.
            max_sentence_length=inputs.MAX_LINE_BYTES,
            minloglevel=2,
        )
    except RuntimeError as e:  # sentencepiece reports a too small vocab_size as an internal check
        if raised:
            raise raised[0] from None
        if "all_chars_count" in str(e):  # and a corpus left without characters
            raise cli.UserError(_NO_TEXT) from None
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(e))
        if needed:
            raise cli.UserError(
                f"--vocab_size={vocab_size} is smaller than the {needed[1]} pieces this corpus "
                f"needs at least (every character and the special tokens); pass "
                f"--vocab_size={needed[1]} or more"
            ) from None
        raise
    model = written.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=model)
    # Nothing but the special pieces and the word mark "▁".
    if all(
        sp.is_control(i) or sp.is_unknown(i) or sp.id_to_piece(i) == "▁"
        for i in range(sp.get_piece_size())
    ):
        raise cli.UserError(_NO_TEXT)
    pieces = "".join(
        f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size())
    )
    storage.makedirs(storage.dirname(output_prefix))
    storage.write_text(output_prefix + ".vocab", pieces)
    storage.write_bytes(output_prefix + ".model", model)  # last: the file readers ask for
    return output_prefix + ".model"


# --vocab_size=3000000000 made the Rust trainer allocate 141 GB and abort the process.
MAX_VOCAB_SIZE = 4_000_000


def main(argv):
    del argv
    minimum = len(SPECIAL) + 1
    if FLAGS.vocab_size < minimum:
        raise cli.UserError(
            f"--vocab_size={FLAGS.vocab_size} leaves no room for text: the {len(SPECIAL)} special "
            f"tokens alone take {len(SPECIAL)} entries; pass --vocab_size={minimum} or more"
        )
    if FLAGS.vocab_size > MAX_VOCAB_SIZE:  # the trainers size their tables by it up front
        raise cli.UserError(
            f"--vocab_size={FLAGS.vocab_size:,} is more than any model's vocabulary; pass at most "
            f"{MAX_VOCAB_SIZE:,} (Gemma's is 256,000)"
        )
    if FLAGS.output.rsplit("/", 1)[-1] in ("", ".", ".."):  # "" or "out/": found at the end
        example = {"wordpiece": "vocab.txt", "sentencepiece": "sp", "bpe": "tokenizer.json"}
        raise cli.UserError(
            f"--output={FLAGS.output!r} names no file; name the file to write, e.g. "
            f"--output={FLAGS.output.rstrip('/.') + '/' if FLAGS.output.strip('/.') else ''}"
            f"{example[FLAGS.model_type]}"
        )
    storage.check_paths({"--input": FLAGS.input, "--output": FLAGS.output}, outputs=["--output"])
    if storage.isdir(FLAGS.output):
        raise cli.UserError(f"--output={FLAGS.output!r} is a directory; name the file to write")
    if FLAGS.model_type == "bpe" and not FLAGS.output.endswith(".json"):
        # Every reader tells a tokenizer.json from a vocab.txt by its name.
        raise cli.UserError(
            f"--output={FLAGS.output!r}: a BPE tokenizer is written as a Hugging Face "
            "tokenizer.json; name the file ....json (e.g. tokenizer.json)"
        )
    if FLAGS.model_type == "wordpiece" and FLAGS.output.endswith((".json", ".model")):
        raise cli.UserError(
            f"--output={FLAGS.output!r}: a WordPiece vocabulary is a vocab.txt, and readers take "
            "a .json file for a tokenizer.json and a .model file for a SentencePiece model; name "
            "the file ....txt (e.g. vocab.txt)"
        )
    # SentencePiece's --output is a prefix: "sp.model" names the model file, not "sp.model.model"
    # (the other kinds' names cannot end in .model: refused above).
    prefix = FLAGS.output.removesuffix(".model")
    # Before minutes of training: an unwritable directory is an error now, not a traceback later.
    output.prepare_output_dir(storage.dirname(FLAGS.output), "--output")
    try:
        language = sentences.language_code(FLAGS.language)
    except ValueError as e:
        raise cli.UserError(f"--language={FLAGS.language}: {e}") from None
    corpus = Corpus(FLAGS.input, FLAGS.text_field, language, documents=FLAGS.model_type == "bpe")
    # Parses every input: a missing or unreadable one fails here.
    if next(iter(corpus), None) is None:
        raise readers.InputError(
            f"--input={','.join(FLAGS.input)} holds no text (empty or blank files, or no "
            "documents in the --text_field); pass the corpus the vocabulary is for"
        )
    train = {
        "wordpiece": train_wordpiece,
        "sentencepiece": train_sentencepiece,
        "bpe": train_bpe,
    }[FLAGS.model_type]
    path = train(corpus, prefix, FLAGS.vocab_size, FLAGS.do_lower_case)
    tokenizer = job.load_tokenizer(path, FLAGS.do_lower_case)
    print(f"wrote {path}: {tokenizer.vocab_size} entries")
    if tokenizer.vocab_size < FLAGS.vocab_size:
        # The trainers stop when the corpus has no more pieces to add: easy to miss.
        cli.warn(
            f"the corpus filled only {tokenizer.vocab_size} of the "
            f"--vocab_size={FLAGS.vocab_size} entries asked for: it has too few distinct words "
            "to learn more pieces; train on a larger corpus for that many, or pass "
            f"--vocab_size={tokenizer.vocab_size} to say what you get",
        )
    return 0


if __name__ == "__main__":
    flags.mark_flags_as_required(["input", "output"])
    cli.run(main)
