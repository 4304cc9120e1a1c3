"""Any Hugging Face tokenizer.json (BPE, Unigram, WordPiece) behind bert_jax.text.tokenization's
interface, through the `tokenizers` library (its ids exactly). No JAX import: data_prep uses it.
`word_marks` says how pieces mark word starts for whole-word masking: "prefix" ("##"),
"metaspace" ("▁"), "bytelevel" (a space, or a change of the kind of character) or None (refused).
The special tokens and the word rules: docs/data_prep.md, "Hugging Face tokenizer.json".
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import unicodedata

import numpy as np

from bert_jax import cli

KIND = "tokenizer_json"  # the manifest's vocab.kind
# Names a special token goes by, in order of preference, for what the post-processor does not say.
SPECIAL_NAMES = {
    "cls": ("[CLS]", "<s>", "<cls>", "[BOS]", "<bos>"),
    "sep": ("[SEP]", "</s>", "<sep>", "[EOS]", "<eos>"),
    "mask": ("[MASK]", "<mask>", "<MASK>"),
    "pad": ("[PAD]", "<pad>", "<PAD>"),
    "unk": ("[UNK]", "<unk>", "<UNK>"),
}
# The kind of a piece's first and last character, for "bytelevel" word marks (masking.Vocab).
LETTER, DIGIT, SPACE, OTHER, SPECIAL = 1, 2, 3, 4, 5
JOIN = 6  # first: the piece starts inside a character (always continues); last: ends in " "
INHERIT = 7  # last: the piece only ends a character begun in the piece before (take its kind)
_WHITE_SPACE = frozenset(  # Unicode White_Space: what \s matches in the pre-tokenizer's regex
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(map(chr, range(0x2000, 0x200B)))
)


class VocabError(cli.UserError):
    """A vocabulary or tokenizer file that cannot be used (every tokenizer raises it)."""


class JsonTokenizer:
    kind = KIND

    def __init__(self, path: str, do_lower_case: bool | None = None):
        import tokenizers

        del do_lower_case  # the file's normalizer decides
        if not os.path.isfile(path):
            raise VocabError(f"tokenizer file {path!r} {cli.not_a_file(path)}")
        self.vocab_file = path
        try:
            self._tok = tokenizers.Tokenizer.from_file(path)
        except Exception as e:  # the library raises a bare Exception for a malformed file
            raise VocabError(
                f"{path!r} is not a Hugging Face tokenizer.json ({e}); pass a tokenizer.json, a "
                "vocab.txt or a SentencePiece .model"
            ) from e
        self._tok.no_truncation()
        self._tok.no_padding()
        self.spec = json.loads(self._tok.to_str())
        self.vocab = dict(self._tok.get_vocab(with_added_tokens=True))
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.vocab_words = [self.inv_vocab[i] for i in sorted(self.inv_vocab)]
        self._check_unknown()
        self.special_tokens = self._special_tokens()
        ids = {role: self.vocab[token] for role, token in self.special_tokens.items()}
        self.cls_id, self.sep_id, self.mask_id = ids["cls"], ids["sep"], ids["mask"]
        self.pad_id = ids.get("pad", 0)
        self.unk_id = ids.get("unk", self.pad_id)  # byte-level BPE has no unknown pieces
        # Words of their own, as in the library's word_ids: special tokens, added tokens.
        added = frozenset(t["id"] for t in self.spec.get("added_tokens") or ())
        self._whole_words = added | frozenset(ids.values())
        self.word_marks = _word_marks(self.spec)
        self._prefix = (self.spec.get("model") or {}).get("continuing_subword_prefix") or "##"
        metaspace = _find(self.spec.get("pre_tokenizer"), "Metaspace") or {}
        self._metaspace = metaspace.get("replacement") or "\u2581"
        self.sentence_joiner = self._sentence_joiner()
        normalizer = self._tok.normalizer
        self.do_lower_case = bool(normalizer) and normalizer.normalize_str("AZ") == "az"

    def _sentence_joiner(self) -> str:
        """What goes before a document's next sentence to give its ids in running text: " ", or ""
        where the space is a piece of its own (Llama-2's normalizer: " Next" is "▁" "▁Next")."""

        def ids(text: str) -> list[int]:
            return self._tok.encode(text, add_special_tokens=False).ids

        probes = (("end.", "Next one"), ("a", "b"), ("1", "2"))
        for joiner in (" ", ""):
            if all(ids(f"{a} {b}") == ids(a) + ids(joiner + b) for a, b in probes):
                return joiner
        return " "

    @property
    def vocab_size(self) -> int:
        return max(self.inv_vocab) + 1

    @property
    def model_type(self) -> str:
        return str(self.spec.get("model", {}).get("type", ""))

    def _check_unknown(self) -> None:
        """Refuses a model that needs an unknown token it lacks (the library would raise on the
        first character outside the vocabulary, deep inside a data_prep worker)."""
        model = self.spec.get("model") or {}
        kind, unk = model.get("type"), model.get("unk_token")
        if kind == "Unigram" and model.get("unk_id") is None:  # needed even with byte_fallback
            missing = "no unk_id"
        elif kind in ("WordPiece", "WordLevel", "BPE") and unk not in self.vocab:
            # A BPE naming no unk_token, or falling back to all 256 byte pieces, does not need it.
            fallback = model.get("byte_fallback") and all(
                f"<0x{b:02X}>" in self.vocab for b in range(256)
            )
            if kind == "BPE" and (unk is None or fallback):
                return
            missing = f"its unk_token {unk!r}, which is not in its vocabulary"
        else:
            return
        raise VocabError(
            f"tokenizer file {self.vocab_file!r}: its {kind} model has {missing}, so the library "
            "fails on any text outside its vocabulary; add an unknown token ([UNK] or <unk>) to "
            "the vocabulary and name it in the model"
        )

    def _special_tokens(self) -> dict[str, str]:
        """{role: token} for cls, sep, mask and, where the file has them, pad and unk."""
        out = _template_ends(self.spec.get("post_processor"))
        model = self.spec.get("model") or {}
        padding = self.spec.get("padding") or {}
        preferred = {"unk": model.get("unk_token"), "pad": padding.get("pad_token")}
        if model.get("type") == "Unigram" and model.get("unk_id") is not None:
            preferred["unk"] = self.inv_vocab.get(model["unk_id"])
        for role, names in SPECIAL_NAMES.items():
            if out.get(role) in self.vocab:
                continue
            found = [n for n in (preferred.get(role), *names) if n and n in self.vocab]
            if found:
                out[role] = found[0]
            else:
                out.pop(role, None)
        missing = [role for role in ("cls", "sep", "mask") if role not in out]
        if missing:
            wanted = ", ".join(
                f"{role} ({' or '.join(SPECIAL_NAMES[role][:2])})" for role in missing
            )
            raise VocabError(
                f"tokenizer file {self.vocab_file!r} defines no {wanted} token: pre-training "
                "records need [CLS], [SEP] and [MASK]; add them as special tokens (python -m "
                "data_prep.vocab --model_type=bpe writes a tokenizer.json that has them)"
            )
        return out

    def is_continuation(self, token: str) -> bool:
        """Whether `token` continues the word before it; "bytelevel": as far as the piece says
        (masking.Vocab adds the character kinds)."""
        if self.word_marks == "metaspace" and token == self.special_tokens.get("unk"):
            # An unknown character: "▁" before it is a piece of its own, so it continues.
            return True
        if token not in self.vocab or self.vocab[token] in self._whole_words:
            return False
        if self.word_marks == "prefix":
            return token.startswith(self._prefix)
        if self.word_marks == "metaspace":
            return not token.startswith(self._metaspace)
        if self.word_marks == "bytelevel":
            return not _starts_spaced_word(_byte_text(token))
        return False

    def character_kinds(self) -> tuple[bytes, bytes] | None:
        """Per id, the kind of its first and last character, for "bytelevel" word marks."""
        if self.word_marks != "bytelevel":
            return None
        first, last = bytearray(self.vocab_size), bytearray(self.vocab_size)
        for token, i in self.vocab.items():
            if i in self._whole_words:
                first[i] = last[i] = SPECIAL
            else:
                first[i], last[i] = _kinds(_byte_text(token))
        return bytes(first), bytes(last)

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """As WordPieceTokenizer.encode_batch; line by line, as the library's batch call's thread
        pool is lost to a data_prep worker forked from a parent that used it."""
        return concatenated(
            [self._tok.encode(line, add_special_tokens=False).ids for line in lines]
        )

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        unk = self.special_tokens.get("unk", "")
        return [self.inv_vocab.get(int(i), unk) for i in ids]


def concatenated(encoded: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Ids per line -> encode_batch's (all ids concatenated, int32; ids per line, int64)."""
    per_line = np.fromiter(map(len, encoded), np.int64, len(encoded))
    ids = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, int(per_line.sum()))
    return ids, per_line


def _find(spec, kind: str) -> dict | None:
    """The first component of type `kind` in a spec (which may be a Sequence of them)."""
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == kind:
        return spec
    for part in spec.get("pretokenizers") or spec.get("processors") or spec.get("decoders") or ():
        found = _find(part, kind)
        if found:
            return found
    return None


def _template_ends(processor) -> dict[str, str]:
    """{"cls": token, "sep": token} as the post-processor puts them around a single sequence."""
    for kind in ("TemplateProcessing", "BertProcessing", "RobertaProcessing"):
        spec = _find(processor, kind)
        if spec is None:
            continue
        if kind != "TemplateProcessing":
            return {"cls": spec["cls"][0], "sep": spec["sep"][0]}
        pieces = spec.get("single") or []
        where = [i for i, p in enumerate(pieces) if "Sequence" in p]
        names = spec.get("special_tokens") or {}
        out = {}
        if where and where[0] > 0 and "SpecialToken" in pieces[0]:
            out["cls"] = _template_token(pieces[0], names)
        if where and where[-1] < len(pieces) - 1 and "SpecialToken" in pieces[-1]:
            out["sep"] = _template_token(pieces[-1], names)
        return out
    return {}


def _template_token(piece: dict, names: dict) -> str:
    """The token a TemplateProcessing piece {"SpecialToken": {"id": name}} stands for."""
    name = piece["SpecialToken"]["id"]
    return ((names.get(name) or {}).get("tokens") or [name])[0]


def _word_marks(spec: dict) -> str | None:
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece" or model.get("continuing_subword_prefix"):
        return "prefix"
    pre = spec.get("pre_tokenizer")
    if _find(pre, "ByteLevel") or (_find(spec.get("decoder"), "ByteLevel") and not pre):
        return "bytelevel"
    if _find(pre, "Metaspace") or (not pre and _spaces_to_metaspace(spec.get("normalizer"))):
        return "metaspace"
    return None


def _spaces_to_metaspace(normalizer) -> bool:
    """A normalizer turning spaces into "▁" (Llama-2's): its pieces mark words as Metaspace's."""
    if not isinstance(normalizer, dict):
        return False
    if normalizer.get("type") == "Replace":
        return (
            normalizer.get("pattern") == {"String": " "} and normalizer.get("content") == "\u2581"
        )
    return any(_spaces_to_metaspace(n) for n in normalizer.get("normalizers") or ())


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """GPT-2's ByteLevel alphabet back to bytes: printable Latin-1 as is, the rest chr(256 + n)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in set(printable)]
    table.update({chr(256 + n): b for n, b in enumerate(others)})
    return table


def _byte_text(token: str) -> bytes | None:
    """A byte-level piece's bytes; None for a piece outside the alphabet (an added token)."""
    table = _unicode_to_byte()
    try:
        return bytes(table[ch] for ch in token)
    except KeyError:
        return None


def _starts_spaced_word(raw: bytes | None) -> bool:
    """A piece that begins with a space and then text starts a word; whitespace alone does not."""
    if raw is None:
        return True
    if raw[:1] != b" ":
        return False
    text = raw.decode("utf-8", errors="ignore")
    if any(ch not in _WHITE_SPACE for ch in text):
        return True
    # " " and the first bytes of a character ("ĠðĲĢ", a space and most of a 4-byte letter):
    # text unless that character is likely whitespace.
    start = len(raw.rstrip(bytes(range(0x80, 0xC0)))) - 1  # the last character's lead byte
    return raw[start] >= 0xC0 and _guess(raw[start:]) != SPACE


def _kind(ch: str) -> int:
    if ch in _WHITE_SPACE:
        return SPACE
    category = unicodedata.category(ch)[0]
    return LETTER if category == "L" else DIGIT if category == "N" else OTHER


@functools.cache
def _guess(prefix: bytes) -> int:
    """The kind most assigned code points with this UTF-8 prefix have ("\xd0": Cyrillic, LETTER)."""
    lead = prefix[0]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    counts = dict.fromkeys((LETTER, DIGIT, SPACE, OTHER), 0)
    free = size - len(prefix)
    # Every value of the next two bytes, a sample of a third (a four-byte lead alone: 2^18 points).
    choices = [range(0x80, 0xC0)] * min(free, 2) + [range(0x80, 0xC0, 16)] * max(free - 2, 0)
    for rest in itertools.product(*choices):
        ch = (prefix + bytes(rest)).decode("utf-8", errors="ignore")
        if len(ch) == 1 and unicodedata.category(ch) != "Cn":
            counts[_kind(ch)] += 1
    best = max(counts.values())
    return next(k for k in (OTHER, LETTER, DIGIT, SPACE) if counts[k] == best)


def _kinds(raw: bytes | None) -> tuple[int, int]:
    """(kind of the first character, of the last) of a byte-level piece: JOIN and INHERIT as at
    their definitions; a character whose start alone is in the piece gets _guess's kind."""
    if raw is None:
        return OTHER, OTHER
    inside = len(raw) - len(raw.lstrip(bytes(range(0x80, 0xC0))))
    body = raw[inside:]
    tail = 0  # bytes of an unfinished character at the end
    for n in range(1, min(4, len(body)) + 1):
        if body[-n] >= 0xC0:
            tail = n if n < (2 if body[-n] < 0xE0 else 3 if body[-n] < 0xF0 else 4) else 0
            break
        if body[-n] < 0x80:
            break
    text = body[: len(body) - tail].decode("utf-8", errors="ignore")
    if inside:
        first = JOIN
    elif text:
        first = _kind(text[0])
    else:
        first = _guess(body) if body else JOIN
    if raw.endswith(b" "):
        last = JOIN
    elif tail:
        last = _guess(body[len(body) - tail :])
    elif text:
        last = _kind(text[-1])
    else:
        last = INHERIT
    return first, last
