"""Tokenizers behind one interface: WordPiece (a BERT vocab.txt; google-research/bert's
FullTokenizer ids exactly, cached per word), SentencePiece and any Hugging Face tokenizer.json
(tokenizer_json.py); `make_tokenizer` picks one. No JAX import: data_prep uses this module.
The rules, the differential tests and the throughput: docs/data_prep.md, "Tokenizer parity".
"""

import array
import functools
import itertools
import os
import re
import unicodedata

import numpy as np

from bert_jax import cli, storage
from bert_jax.text import tokenizer_json

CLS, SEP, MASK, PAD, UNK = "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # in the order our vocabularies give them ids 0-4
# Unset do_lower_case (a config, a manifest or a model directory that does not say) means this:
# uncased, the original's flag default. Every flag default and every None is resolved from here.
DO_LOWER_CASE = True

# Whitespace to str.split() but controls FullTokenizer deletes ("a\x0bb" is its one word "ab"):
# lines holding one take the exact path whole.
_SPLIT_DISAGREES_CHARS = "\x0b\x0c\x1c\x1d\x1e\x1f\x85"
_SPLIT_DISAGREES = re.compile(f"[{_SPLIT_DISAGREES_CHARS}]")
# An ASCII word needs none of the Unicode rules: a cheap cache miss. ASCII controls are deleted,
# joining their neighbours ("a\x01b" is "ab"), so words holding one take the general path.
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_ASCII_PIECES = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]|\n")  # "\n": between _add_words' words
_LINE_END = "\uffff"  # a Unicode noncharacter: not in text (lines holding it take the other path)
_CHINESE_RANGES = (  # the original's _is_chinese_char, in its order
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip
_CACHE_LIMIT = 1 << 20  # distinct words kept; cleared when full, so memory stays bounded
VocabError = tokenizer_json.VocabError  # every tokenizer's unusable vocabulary or model


def _is_punctuation(ch: str) -> bool:
    # All non-alphanumeric ASCII counts as punctuation ("$", "^", "`"), as in BERT.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


class _CharMap(dict):
    """A str.translate table that works out a character's entry on first sight (one Python call
    per distinct character, not per character); cleared when full."""

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def __missing__(self, cp: int):
        if len(self) >= 1 << 16:
            self.clear()
        value = self[cp] = self.rule(chr(cp))
        return value


def _clean(ch: str):
    """The original's _clean_text and _tokenize_chinese_chars for one character (controls: Cc and
    Cf only; private-use and unassigned characters are kept)."""
    category = unicodedata.category(ch)
    if ch in "\x00\ufffd" or (category in ("Cc", "Cf") and ch not in "\t\n\r"):
        return None
    if ch in " \t\n\r" or category == "Zs":
        return " "
    return f" {ch} " if any(lo <= ord(ch) <= hi for lo, hi in _CHINESE_RANGES) else ord(ch)


_CLEAN = _CharMap(_clean)
_DROP_MN = _CharMap(lambda ch: None if unicodedata.category(ch) == "Mn" else ord(ch))
_SPACE_PUNCTUATION = _CharMap(lambda ch: f" {ch} " if _is_punctuation(ch) else ord(ch))
# "1" for a character whose decomposition is all combining marks (what canonical ordering sorts)
_NONSTARTER = _CharMap(
    lambda ch: "1" if all(map(unicodedata.combining, unicodedata.normalize("NFD", ch))) else "0"
)
_DECOMPOSE = _CharMap(lambda ch: unicodedata.normalize("NFD", ch))
_LONG_RUN = 64


@functools.cache
def _nonstarters() -> np.ndarray:
    """_NONSTARTER for every code point, as a uint8 table (built once: 0.1 s)."""
    table = np.fromiter(
        map(unicodedata.combining, map(chr, range(0x110000))), np.uint8, 0x110000
    ).astype(bool)
    for cp in range(0x110000):
        if unicodedata.decomposition(chr(cp))[:1] not in ("", "<"):  # a canonical decomposition
            table[cp] = _NONSTARTER[cp] == "1"
    return table


def _has_long_run(text: str) -> bool:
    """Whether `text` holds _LONG_RUN characters in a row that decompose to combining marks."""
    if len(text) < _LONG_RUN:
        return False
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), "<u4")
    marks = np.cumsum(_nonstarters()[codes], dtype=np.int64)
    return bool(
        np.any(marks[_LONG_RUN - 1 :] - np.concatenate([[0], marks[:-_LONG_RUN]]) == _LONG_RUN)
    )


def _nfd(text: str) -> str:
    """unicodedata.normalize("NFD", text), but a long run of combining marks, which CPython sorts
    in quadratic time, is sorted here stably by combining class: NFD's definition."""
    if not _has_long_run(text):
        return unicodedata.normalize("NFD", text)
    decomposed = text.translate(_DECOMPOSE)
    pieces, at = [], 0
    for run in re.finditer("1{2,}", decomposed.translate(_NONSTARTER)):
        pieces.append(decomposed[at : run.start()])
        pieces.append(
            "".join(sorted(decomposed[run.start() : run.end()], key=unicodedata.combining))
        )
        at = run.end()
    pieces.append(decomposed[at:])
    return "".join(pieces)


def basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    """BERT's BasicTokenizer on the whole text, not word by word as the original, with the same
    words (no rule looks across whitespace: docs/data_prep.md, "Tokenizer parity")."""
    text = text.translate(_CLEAN)
    if do_lower_case:
        text = text.lower()
        if not text.isascii():
            text = _nfd(text).translate(_DROP_MN)
    return text.translate(_SPACE_PUNCTUATION).split()


def basic_tokenize_with_offsets(
    text: str, do_lower_case: bool
) -> list[tuple[str, list[tuple[int, int]]]]:
    """basic_tokenize(text), each token with the [start, end) span in `text` of each of its
    characters (SQuAD's answers); a token NFD reordered is not found, and spans to the end of
    `text` (callers give one word at a time)."""
    norm, back = [], []
    for j, ch in enumerate(text):
        c = ch.translate(_CLEAN)
        if do_lower_case:
            c = c.lower()
            if not c.isascii():
                c = unicodedata.normalize("NFD", c).translate(_DROP_MN)
        norm.append(c)
        back.extend([j] * len(c))
    flat, cursor, out = "".join(norm), 0, []
    # str.lower's one context rule: a final capital sigma becomes ς, alone σ (same length).
    unsigma = flat.replace("ς", "σ")
    for token in basic_tokenize(text, do_lower_case):
        k = flat.find(token, cursor)
        if k < 0:
            k = unsigma.find(token.replace("ς", "σ"), cursor)
        if k < 0:
            lo = back[cursor] if cursor < len(back) else len(text)
            out.append((token, [(lo, len(text))] * len(token)))
            continue
        cursor = k + len(token)
        out.append((token, [(back[i], back[i] + 1) for i in range(k, cursor)]))
    return out


def lower_case(value: bool | None) -> bool:
    return DO_LOWER_CASE if value is None else bool(value)


class WordPieceTokenizer:
    """Text -> WordPiece tokens/ids, identical to google-research/bert's FullTokenizer."""

    kind = "wordpiece"  # the manifest's vocab.kind
    sentence_joiner = ""  # data_prep encodes a document's sentences apart (see JsonTokenizer)
    max_chars_per_word = 200  # the original's: a longer word is [UNK]

    def __init__(self, vocab_file: str, do_lower_case: bool = DO_LOWER_CASE):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = load_vocab(vocab_file)
        # Tokens in file order; the original draws its 10% random replacements from this list.
        self.vocab_words = list(self.vocab)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.unk_id = self.vocab[UNK]
        self.cls_id, self.sep_id, self.mask_id = self.vocab[CLS], self.vocab[SEP], self.vocab[MASK]
        self.pad_id = self.vocab.get(PAD, 0)
        self._cache: dict[str, tuple[int, ...]] = {}  # encode(): word -> ids
        # encode_batch()'s: word -> row, whose ids are _table[_table_start[row]:][:_table_len[row]]
        self._word_index: dict[str, int] = {}
        self._table = array.array("i")
        self._table_start = array.array("q")
        self._table_len = array.array("q")
        # Basic tokens -> ids, for both caches' misses ("\n" separates _add_words' words: no ids).
        self._piece_cache: dict[str, tuple[int, ...]] = {}
        self._clear_batch_cache()

    @property
    def vocab_size(self) -> int:
        return max(self.vocab.values()) + 1

    def is_continuation(self, token: str) -> bool:
        """Whether a piece continues a word ("##ing"), for whole-word masking."""
        return token.startswith("##")

    @functools.cached_property
    def _wordpiece(self):
        """FullTokenizer's WordpieceTokenizer (greedy longest match, [UNK] for a word too long or
        with an unmatched rest): the tokenizers library's WordPiece model has the same rule."""
        import tokenizers

        return tokenizers.models.WordPiece(
            self.vocab, unk_token=UNK, max_input_chars_per_word=self.max_chars_per_word
        )

    def tokenize(self, text: str) -> list[str]:
        """Exact FullTokenizer.tokenize, uncached."""
        words = basic_tokenize(text, self.do_lower_case)
        return [t.value for word in words for t in self._wordpiece.tokenize(word)]

    def _piece_ids(self, piece: str) -> tuple[int, ...]:
        hit = self._piece_cache.get(piece)
        if hit is None:
            hit = self._piece_cache[piece] = tuple(t.id for t in self._wordpiece.tokenize(piece))
        return hit

    def _encode_words(self, keys: list[str]) -> dict[str, tuple[int, ...]]:
        """Cache keys (words, or encode_batch's lines str.split would cut wrongly) -> ids, each as
        tokenize(key), through one basic_tokenize with a noncharacter word between keys."""
        together = [key for key in keys if _LINE_END not in key]
        tokens = basic_tokenize(f" {_LINE_END} ".join(together), self.do_lower_case)
        tokens.append(_LINE_END)
        ends = itertools.compress(itertools.count(), map(_LINE_END.__eq__, tokens))
        out, start, chain = {}, 0, itertools.chain.from_iterable
        for key, end in zip(together, ends):
            out[key] = tuple(chain(map(self._piece_ids, tokens[start:end])))
            start = end + 1
        for key in keys:
            if _LINE_END in key:
                out[key] = tuple(self.convert_tokens_to_ids(self.tokenize(key)))
        return out

    def _encode_keys(self, keys) -> dict[str, tuple[int, ...]]:
        """Cache keys -> ids: ASCII words without controls by regex, the rest by _encode_words."""
        plain = [key for key in keys if key.isascii() and not _ASCII_CONTROL.search(key)]
        out = self._encode_words(list(set(keys).difference(plain)))
        for key in plain:  # exactly as tokenize(key): every piece is a basic token
            pieces = _ASCII_PIECES.findall(key.lower() if self.do_lower_case else key)
            out[key] = tuple(itertools.chain.from_iterable(map(self._piece_ids, pieces)))
        return out

    def encode(self, text: str) -> list[int]:
        """Text -> ids (no [CLS]/[SEP]); cached per whitespace-separated word."""
        if _SPLIT_DISAGREES.search(text):
            return self.convert_tokens_to_ids(self.tokenize(text))
        cache = self._cache
        words = text.split()
        hits = list(map(cache.get, words))
        if None in hits:
            if len(cache) + len(words) > _CACHE_LIMIT:  # bounded memory: start afresh when full
                cache.clear()
                self._piece_cache = {"\n": ()}
            cache.update(self._encode_keys(set(words).difference(cache)))
            hits = map(cache.__getitem__, words)
        return list(itertools.chain.from_iterable(hits))

    def _clear_batch_cache(self) -> None:
        self._word_index.clear()
        self._word_index[_LINE_END] = -1  # marks line ends in encode_batch's word list
        del self._table[:], self._table_start[:], self._table_len[:]
        self._piece_cache = {"\n": ()}

    def _add_words(self, words: list[str]) -> None:
        """Distinct uncached words into the batch cache: ASCII ones cut by one regex pass over all
        of them, the others by _encode_words."""
        simple = [word for word in words if word.isascii()]
        other = [word for word in words if not word.isascii()]
        joined = "\n".join(simple)
        if _ASCII_CONTROL.search(joined):  # rare: such words take the general path
            other += [word for word in simple if _ASCII_CONTROL.search(word)]
            simple = [word for word in simple if not _ASCII_CONTROL.search(word)]
            joined = "\n".join(simple)
        pieces = _ASCII_PIECES.findall(joined.lower() if self.do_lower_case else joined)
        piece_cache = self._piece_cache
        for piece in set(pieces).difference(piece_cache):
            self._piece_ids(piece)
        piece_ids = list(map(piece_cache.__getitem__, pieces))
        # A word's ids are those of its pieces up to the next "\n" (none for a word of controls).
        word_of_piece = np.cumsum(np.fromiter(map("\n".__eq__, pieces), bool, len(pieces)))
        piece_len = np.fromiter(map(len, piece_ids), np.int64, len(pieces))
        simple_len = np.bincount(word_of_piece, weights=piece_len, minlength=len(simple))
        encoded = self._encode_words(other)
        other_ids = [encoded[word] for word in other]
        other_len = np.fromiter(map(len, other_ids), np.int64, len(other))
        word_len = np.concatenate([simple_len, other_len]).astype(np.int64)
        first = len(self._table_len)  # the new words' rows follow the existing ones
        self._table_start.extend((len(self._table) + np.cumsum(word_len) - word_len).tolist())
        self._table_len.extend(word_len.tolist())
        self._table.extend(itertools.chain.from_iterable(piece_ids))
        self._table.extend(itertools.chain.from_iterable(other_ids))
        self._word_index.update(zip(simple + other, range(first, first + len(words))))

    def _rows(self, words: list[str]) -> np.ndarray:
        """Batch-cache rows of `words`, adding the missing ones; valid until the next call."""
        index = self._word_index
        try:  # every word cached, the common case once a corpus is under way
            return np.fromiter(map(index.__getitem__, words), np.int64, len(words))
        except KeyError:
            pass
        # Rows are internal: the order in which missing words get them does not change any ids.
        missing = set(words).difference(index)
        if len(index) + len(missing) > _CACHE_LIMIT:  # bounded memory: start afresh when full
            self._clear_batch_cache()
            missing = set(words).difference(index)
        self._add_words(list(missing))
        return np.fromiter(map(index.__getitem__, words), np.int64, len(words))

    def encode_batch(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Lines -> (all their ids concatenated, int32; ids per line, int64), encode()'s ids; the
        words of all lines go through the cache in one pass, then a numpy gather expands rows."""
        if not lines:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        joined = "\n".join(lines)
        # Seven substring tests are ten times faster than one regex search.
        if _LINE_END not in joined and not any(ch in joined for ch in _SPLIT_DISAGREES_CHARS):
            # One split of all lines, with a marker word between lines (row -1) to find their ends.
            rows = self._rows(f" {_LINE_END} ".join(lines).split())
            ends = np.flatnonzero(rows < 0)
            words_in_line = np.diff(ends, prepend=-1, append=len(rows)) - 1
            rows = np.delete(rows, ends)
        else:
            # Lines str.split would cut wrongly: a cache key each, its " " setting it apart.
            words_per_line = [
                [line + " "] if _SPLIT_DISAGREES.search(line) or _LINE_END in line else line.split()
                for line in lines
            ]
            words_in_line = np.fromiter(map(len, words_per_line), np.int64, len(lines))
            rows = self._rows(list(itertools.chain.from_iterable(words_per_line)))
        starts = np.frombuffer(self._table_start, np.int64)[rows]
        lengths = np.frombuffer(self._table_len, np.int64)[rows]
        ends = np.cumsum(lengths)  # [words]: where each word's ids end in the output
        # Output position p of word w reads table[starts[w] + p - (ends[w] - lengths[w])].
        total = ends[-1] if len(ends) else 0
        source = np.repeat(starts - (ends - lengths), lengths) + np.arange(total)
        ids = np.frombuffer(self._table, np.int32)[source]
        word_ends = np.cumsum(words_in_line)
        token_ends = np.concatenate([[0], ends])[word_ends]
        per_line = np.diff(token_ends, prepend=0)
        return ids, per_line

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return [self.vocab[t] for t in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.inv_vocab.get(int(i), UNK) for i in ids]


class SentencePieceTokenizer:
    """Text -> SentencePiece pieces/ids; the model must define [CLS], [SEP] and [MASK]."""

    kind = "sentencepiece"
    sentence_joiner = ""  # every sentence gets its own "▁" prefix

    def __init__(self, model_file: str, do_lower_case: bool = False):
        import sentencepiece as spm

        if not os.path.isfile(model_file):
            raise VocabError(f"SentencePiece model {model_file!r} {cli.not_a_file(model_file)}")
        self.vocab_file = model_file
        self.do_lower_case = do_lower_case
        try:
            self.sp = spm.SentencePieceProcessor(model_file=model_file)
        except (RuntimeError, OSError) as e:
            raise VocabError(f"{model_file!r} is not a SentencePiece model ({e})") from e
        # Only a model that keeps case gets lower-cased text (ALBERT's way): str.lower before a
        # case-folding normalizer would change what it sees ("İ" becomes "i" and a combining dot).
        self._lower = do_lower_case and self.sp.normalize("ABC") != self.sp.normalize("abc")
        self.vocab_words = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.vocab = {p: i for i, p in enumerate(self.vocab_words)}
        self.inv_vocab = dict(enumerate(self.vocab_words))
        missing = [t for t in (CLS, SEP, MASK) if t not in self.vocab]
        if missing:
            raise VocabError(
                f"SentencePiece model {model_file!r} lacks {missing}; train it with "
                f"control_symbols=[CLS],[SEP],[MASK] (python -m data_prep.vocab does, as ALBERT)"
            )
        self.cls_id, self.sep_id, self.mask_id = self.vocab[CLS], self.vocab[SEP], self.vocab[MASK]
        self.unk_id = self.sp.unk_id()
        self.pad_id = self.sp.pad_id() if self.sp.pad_id() >= 0 else 0

    @property
    def vocab_size(self) -> int:
        return len(self.vocab_words)

    def is_continuation(self, token: str) -> bool:
        return not token.startswith("\u2581")  # "▁" starts a word

    def tokenize(self, text: str) -> list[str]:
        return self.sp.encode(text.lower() if self._lower else text, out_type=str)

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text.lower() if self._lower else text, out_type=int)

    def encode_batch(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        lines = [line.lower() for line in lines] if self._lower else list(lines)
        return tokenizer_json.concatenated(self.sp.encode(lines, out_type=int))

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.inv_vocab.get(int(i), "<unk>") for i in ids]


def load_vocab(vocab_file: str) -> dict[str, int]:
    """Reads a BERT vocab.txt (one token a line; its line number is its id) as the original does."""
    if not os.path.isfile(vocab_file):
        raise VocabError(
            f"vocabulary file {vocab_file!r} {cli.not_a_file(vocab_file)}; pass "
            "--vocab_file=PATH/vocab.txt"
        )
    try:
        with open(vocab_file, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise VocabError(f"{vocab_file!r} is not UTF-8 text ({e}); is it a vocab.txt?") from e
    # The original reads with TensorFlow's GFile, whose readline ends lines at "\n" only and drops
    # every "\r" (so "a\rb" is the entry "ab"); each line is then str.strip()ped.
    lines = text.replace("\r", "").split("\n")
    if lines[-1] == "":
        lines.pop()
    vocab = {line.strip(): index for index, line in enumerate(lines)}
    missing = [t for t in (UNK, CLS, SEP, MASK) if t not in vocab]
    if missing:
        raise VocabError(
            f"vocabulary {vocab_file!r} ({len(vocab)} entries) lacks the special tokens {missing}; "
            "a BERT vocab.txt has one token per line including [PAD], [UNK], [CLS], [SEP], [MASK]"
        )
    return vocab


def make_tokenizer(vocab_file: str, do_lower_case: bool = DO_LOWER_CASE):
    """SentencePiece for a .model file, tokenizer_json for a .json file (its normalizer decides
    lower-casing), else WordPiece; a bucket's file is read from a local copy (its vocab_file)."""
    if storage.is_url(vocab_file):
        if not storage.isfile(vocab_file):
            raise VocabError(f"vocabulary file {vocab_file!r} does not exist")
        local = storage.local_copy(vocab_file)
        with storage.reported_as(local, vocab_file):  # its errors name the bucket's file
            return make_tokenizer(local, do_lower_case)
    if vocab_file.endswith(".model"):
        return SentencePieceTokenizer(vocab_file, do_lower_case=do_lower_case)
    if vocab_file.endswith(".json"):
        return tokenizer_json.JsonTokenizer(vocab_file, do_lower_case)
    return WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)


def bert_wordpiece(
    vocab: dict[str, int],
    do_lower_case: bool,
    *,
    strip_accents: bool | None = None,
    tokenize_chinese_chars: bool = True,
    max_chars_per_word: int = 100,
):
    """A tokenizers.Tokenizer of a WordPiece vocabulary, built as transformers' BertTokenizer
    builds its own (BERT's post-processor where it has [CLS] and [SEP])."""
    import tokenizers as tk

    tok = tk.Tokenizer(
        tk.models.WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=max_chars_per_word)
    )
    tok.normalizer = tk.normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip_accents,
        lowercase=do_lower_case,
    )
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tok.decoder = tk.decoders.WordPiece(prefix="##")
    specials = [token for token in SPECIAL_TOKENS if token in vocab]
    tok.add_special_tokens([tk.AddedToken(token, special=True) for token in specials])
    if CLS in vocab and SEP in vocab:
        tok.post_processor = bert_post_processor(vocab[CLS], vocab[SEP])
    return tok


def bert_post_processor(cls_id: int, sep_id: int):
    """tokenizers' post-processor of BERT's inputs ("[CLS] $A [SEP] $B [SEP]", B type id 1)."""
    from tokenizers import processors

    return processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
