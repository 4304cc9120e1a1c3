"""A plain-Python oracle of google-research/bert's FullTokenizer, and checks of the oracle itself.

`FullTokenizerOracle` transcribes the rules of google-research/bert `tokenization.py` (commit
eedf571, the one GOLDEN.md's records come from) without its TensorFlow import, so the differential
tests (tests/unit/bert_jax/text/tokenization/test_differential.py) can compare
bert_jax.text.tokenization with the original on every code point in `make test`. It is written for
being read next to the original, not for speed; it was checked once against the real tokenization.py
on every code point in three contexts, cased and uncased (docs/data_prep.md, "Tokenizer parity",
says how and what came out).

The rules, as the original has them (and as bert_jax.text.tokenization must reproduce):
- _clean_text deletes U+0000, U+FFFD and "control" characters, which are categories Cc and Cf only
  (not Co private use, Cn unassigned or Cs): tab, newline and carriage return count as whitespace,
  not control. Whitespace (" ", "\\t", "\\n", "\\r" and category Zs) becomes a space.
- _tokenize_chinese_chars puts spaces around characters of eight CJK ideograph blocks.
- whitespace_tokenize is Python's str.strip().split(): it also splits on what str.isspace() calls
  whitespace (U+2028, U+2029, U+001C..U+001F, ...), whatever _clean_text left of it.
- With do_lower_case: str.lower(), then NFD, then every Mn (nonspacing mark) is dropped.
- _run_split_on_punc makes every punctuation character (categories P*, and all non-alphanumeric
  printable ASCII) a token of its own; the result is split on whitespace again.
- WordpieceTokenizer: a token longer than 200 code points is [UNK]; otherwise greedy longest
  match, "##" before pieces after the first, and [UNK] for the whole token when some position has
  no match.
"""

import unicodedata


def is_whitespace(char):
    return char in (" ", "\t", "\n", "\r") or unicodedata.category(char) == "Zs"


def is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char):
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_chinese_char(cp):
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def clean_text(text):
    return "".join(
        [
            " " if is_whitespace(char) else char
            for char in text
            if not (ord(char) in (0, 0xFFFD) or is_control(char))
        ]
    )


def tokenize_chinese_chars(text):
    return "".join([f" {char} " if is_chinese_char(ord(char)) else char for char in text])


def strip_accents(text):
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def split_on_punc(text):
    output, start_new_word = [], True
    for char in text:
        if is_punctuation(char):
            output.append([char])
            start_new_word = True
        else:
            if start_new_word:
                output.append([])
            start_new_word = False
            output[-1].append(char)
    return ["".join(x) for x in output]


def basic_tokenize(text, do_lower_case):
    text = tokenize_chinese_chars(clean_text(text))
    split_tokens = []
    for token in whitespace_tokenize(text):
        if do_lower_case:
            token = strip_accents(token.lower())
        split_tokens.extend(split_on_punc(token))
    return whitespace_tokenize(" ".join(split_tokens))


def wordpiece_tokenize(token, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    output = []
    for word in whitespace_tokenize(token):
        chars = list(word)
        if len(chars) > max_input_chars_per_word:
            output.append(unk_token)
            continue
        start, sub_tokens = 0, []
        while start < len(chars):
            end, cur = len(chars), None
            while start < end:
                substr = "".join(chars[start:end])
                if start > 0:
                    substr = "##" + substr
                if substr in vocab:
                    cur = substr
                    break
                end -= 1
            if cur is None:
                sub_tokens = [unk_token]
                break
            sub_tokens.append(cur)
            start = end
        output.extend(sub_tokens)
    return output


class GFileReader:
    """The original's tf.gfile.GFile(path, "r"), as measured under TensorFlow 2.21: bytes decoded
    as strict UTF-8, readline ends lines at "\n" only and drops every "\r"."""

    def __init__(self, path):
        with open(path, "rb") as f:
            parts = f.read().decode("utf-8").replace("\r", "").split("\n")
        self.lines = iter([part + "\n" for part in parts[:-1]] + [parts[-1]])

    def readline(self):
        return next(self.lines, "")


def load_vocab(vocab_file):
    reader, vocab, index = GFileReader(vocab_file), {}, 0
    while True:
        token = reader.readline()
        if not token:
            break
        vocab[token.strip()] = index
        index += 1
    return vocab


class FullTokenizerOracle:
    def __init__(self, vocab, do_lower_case=True):
        self.vocab = vocab if isinstance(vocab, dict) else load_vocab(vocab)
        self.do_lower_case = do_lower_case

    def tokenize(self, text):
        return [
            piece
            for token in basic_tokenize(text, self.do_lower_case)
            for piece in wordpiece_tokenize(token, self.vocab)
        ]

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]

    def encode(self, text):
        return self.convert_tokens_to_ids(self.tokenize(text))


# The oracle on the original's own unit tests (tokenization_test.py at eedf571).
