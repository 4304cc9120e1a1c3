"""Tokenizers behind one interface: WordPiece (BERT vocab.txt) and SentencePiece (ALBERT-style).

WordPieceTokenizer gives the ids of google-research/bert's FullTokenizer exactly (BasicTokenizer then
greedy longest-match WordPiece, 200-character word limit, control and format characters dropped,
accents stripped after NFD when lower-casing). It is a from-scratch implementation of that
specification plus a per-word cache: the full rules run once per distinct whitespace-separated word
and natural text is Zipfian, so most words are cache hits. That is what makes data prep fast.

No JAX import: data_prep uses this module, and so do bert_jax.embed and fine-tuning.
"""
import os
import unicodedata

CLS, SEP, MASK, PAD, UNK = "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"

# Characters Python's str.split() treats as whitespace but FullTokenizer deletes as controls, so a
# word containing one ("a\x0bb") is one word to FullTokenizer ("ab") and two to str.split. Lines
# that contain any of them take the exact, uncached path.
_SPLIT_DISAGREES = frozenset("\x0b\x0c\x1c\x1d\x1e\x1f\x85")
_CHINESE_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
_CACHE_LIMIT = 1 << 20  # distinct words kept; cleared when full, so memory stays bounded


class VocabError(ValueError):
    """A vocabulary or tokenizer model that cannot be used; the message says what to fix."""


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    # All non-alphanumeric ASCII counts as punctuation ("$", "^", "`"), as in BERT.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_chinese(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CHINESE_RANGES)


def basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    """BERT's BasicTokenizer: clean, isolate CJK characters, lower-case and strip accents, split punctuation."""
    chars = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if _is_whitespace(ch):
            chars.append(" ")
        elif _is_chinese(cp):
            chars.extend((" ", ch, " "))
        else:
            chars.append(ch)
    pieces = []
    for word in "".join(chars).split():
        if do_lower_case:
            word = word.lower()
            word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        current = []
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    pieces.append("".join(current))
                    current = []
                pieces.append(ch)
            else:
                current.append(ch)
        if current:
            pieces.append("".join(current))
    return pieces


class WordPieceTokenizer:
    """Text -> WordPiece tokens/ids, identical to google-research/bert's FullTokenizer."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True, max_chars_per_word: int = 200):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.max_chars_per_word = max_chars_per_word
        self.vocab = load_vocab(vocab_file)
        # Tokens in file order; the original draws its 10% random replacements from this list.
        self.vocab_words = list(self.vocab)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.unk_id = self.vocab[UNK]
        self.cls_id, self.sep_id, self.mask_id = self.vocab[CLS], self.vocab[SEP], self.vocab[MASK]
        self.pad_id = self.vocab.get(PAD, 0)
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        return max(self.vocab.values()) + 1

    def is_continuation(self, token: str) -> bool:
        """True for a piece that continues a word ("##ing"): whole-word masking keeps words together."""
        return token.startswith("##")

    def _wordpiece(self, word: str) -> list[str]:
        if len(word) > self.max_chars_per_word:
            return [UNK]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            else:
                return [UNK]  # some part of the word is in no vocabulary entry
            out.append(piece)
            start = end
        return out

    def tokenize(self, text: str) -> list[str]:
        """Exact FullTokenizer.tokenize, uncached."""
        out = []
        for word in basic_tokenize(text, self.do_lower_case):
            out.extend(self._wordpiece(word))
        return out

    def encode(self, text: str) -> list[int]:
        """Text -> ids (no [CLS]/[SEP]); cached per whitespace-separated word."""
        if any(ch in _SPLIT_DISAGREES for ch in text):
            return self.convert_tokens_to_ids(self.tokenize(text))
        cache, ids = self._cache, []
        for word in text.split():
            hit = cache.get(word)
            if hit is None:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                hit = cache[word] = tuple(self.convert_tokens_to_ids(self.tokenize(word)))
            ids.extend(hit)
        return ids

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return [self.vocab[t] for t in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.inv_vocab.get(int(i), UNK) for i in ids]


class SentencePieceTokenizer:
    """Text -> SentencePiece pieces/ids; the model must define [CLS], [SEP] and [MASK] (ALBERT does)."""

    def __init__(self, model_file: str, do_lower_case: bool = False):
        import sentencepiece as spm

        if not os.path.isfile(model_file):
            raise VocabError(f"SentencePiece model {model_file!r} does not exist")
        self.vocab_file = model_file
        self.do_lower_case = do_lower_case
        try:
            self.sp = spm.SentencePieceProcessor(model_file=model_file)
        except (RuntimeError, OSError) as e:
            raise VocabError(f"{model_file!r} is not a SentencePiece model ({e})") from e
        self.vocab_words = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.vocab = {p: i for i, p in enumerate(self.vocab_words)}
        self.inv_vocab = dict(enumerate(self.vocab_words))
        missing = [t for t in (CLS, SEP, MASK) if t not in self.vocab]
        if missing:
            raise VocabError(
                f"SentencePiece model {model_file!r} lacks {missing}; train it with "
                f"user_defined_symbols=[CLS],[SEP],[MASK] (python -m data_prep.vocab does)")
        self.cls_id, self.sep_id, self.mask_id = self.vocab[CLS], self.vocab[SEP], self.vocab[MASK]
        self.unk_id = self.sp.unk_id()
        self.pad_id = self.sp.pad_id() if self.sp.pad_id() >= 0 else 0

    @property
    def vocab_size(self) -> int:
        return len(self.vocab_words)

    def is_continuation(self, token: str) -> bool:
        return not token.startswith("\u2581")  # "▁" starts a word

    def tokenize(self, text: str) -> list[str]:
        return self.sp.encode(text.lower() if self.do_lower_case else text, out_type=str)

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text.lower() if self.do_lower_case else text, out_type=int)

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.inv_vocab.get(int(i), "<unk>") for i in ids]


def load_vocab(vocab_file: str) -> dict[str, int]:
    """Reads a BERT vocab.txt (one token a line; its line number is its id) as the original does."""
    if not os.path.isfile(vocab_file):
        raise VocabError(f"vocabulary file {vocab_file!r} does not exist; pass --vocab_file=PATH/vocab.txt")
    try:
        with open(vocab_file, encoding="utf-8") as f:
            lines = f.readlines()  # universal newlines, as the original's readline loop
    except UnicodeDecodeError as e:
        raise VocabError(f"{vocab_file!r} is not UTF-8 text ({e}); is it a vocab.txt?") from e
    vocab: dict[str, int] = {}
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    missing = [t for t in (UNK, CLS, SEP, MASK) if t not in vocab]
    if missing:
        raise VocabError(
            f"vocabulary {vocab_file!r} ({len(vocab)} entries) lacks the special tokens {missing}; "
            "a BERT vocab.txt has one token per line including [PAD], [UNK], [CLS], [SEP], [MASK]")
    return vocab


def make_tokenizer(vocab_file: str, do_lower_case: bool = True):
    """A SentencePiece tokenizer for a .model file, WordPiece for anything else (vocab.txt)."""
    if vocab_file.endswith(".model"):
        return SentencePieceTokenizer(vocab_file, do_lower_case=do_lower_case)
    return WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)
