"""A pre-trained BERT read from disk (a training workdir of ours, or a Hugging Face BERT or
ModernBERT directory): the one loader behind embed, export and fine-tuning's --init. An explicit
`vocab_file` or `do_lower_case` wins over the directory's. docs/model.md, "Import a public BERT".
"""

import atexit
import dataclasses
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from bert_jax import cli, storage
from bert_jax.hf import bert, files
from bert_jax.model import encoder
from bert_jax.text import tokenization
from bert_jax.text.tokenizer_json import concatenated
from bert_jax.training import checkpoints, config_check

# Model config fields that leave the weights' shapes alone: a user may change them.
OVERRIDABLE = (
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "dtype",
    "remat",
    "attention_impl",
    "classifier_pooling",
    "classifier_dropout",
)


@dataclasses.dataclass
class Pretrained:
    config: encoder.BertConfig
    params: dict  # a BertForPreTraining's parameters, nnx.to_pure_dict layout; ["bert"]: encoder
    source: str  # what was read (a checkpoint step, a weights file), for the log
    do_lower_case: bool
    tokenizer: Any  # tokenization.make_tokenizer(vocab_file, ...), None without a vocabulary
    # vocab_file for a saved config: "" where derived into this process's scratch directory.
    vocab_to_record: str = ""
    step: int | None = None  # the checkpoint step, for a training workdir
    # Hugging Face names of weights the directory lacked, freshly initialized.
    fresh: tuple[str, ...] = ()

    def model(self) -> encoder.BertForPreTraining:
        return encoder.model_from_params(self.config, self.params)

    @property
    def vocab_file(self) -> str | None:
        """The tokenizer's local file; None where the directory names none."""
        return None if self.tokenizer is None else self.tokenizer.vocab_file


def load(
    path: str,
    *,
    step: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
) -> Pretrained:
    """The pre-trained model in `path`, `overrides` (of OVERRIDABLE) on its config."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise cli.UserError(
            f"model fields {unknown} cannot be changed on a pre-trained model; only {OVERRIDABLE}"
        )
    if checkpoints.model_dir_kind(path) == checkpoints.WORKDIR:
        return _from_workdir(path, step, overrides, vocab_file, do_lower_case)
    if step is not None:
        raise cli.UserError(f"{path} is a Hugging Face directory: it has no steps to pick from")
    return _from_hf(path, overrides, vocab_file, do_lower_case)


def _from_workdir(path, step, overrides, vocab_file, do_lower_case) -> Pretrained:
    # Pins "latest" to one step; a saved config no run could have written is damage.
    run_config, step = checkpoints.load_config(path, step, config_check.range_problems)
    checkpoints.check_kind(run_config, path, finetuning=False)
    data = run_config.get("data") or {}
    lower = do_lower_case if do_lower_case is not None else data.get("do_lower_case")
    vocab = vocab_file or data.get("vocab_file") or ""
    # Before the weights are restored: a wrong vocabulary is refused at once.
    tokenizer = vocab and _tokenizer(
        vocab, lower, int(run_config.model.vocab_size), run_data=data, given=bool(vocab_file)
    )
    params, _ = checkpoints.restore_params(path, step, run_config)
    saved = run_config.model.to_dict()
    impl = saved.get("attention_impl")
    # The training hardware's kernel, not the model's: splash needs whole 128-token tiles (this
    # run's lengths are the user's) and cuDNN a GPU; 'auto' takes them where they fit.
    if impl == "splash" or (impl == "cudnn" and jax.default_backend() != "gpu"):
        saved["attention_impl"] = "auto"
    config = encoder.BertConfig.from_config_dict({**saved, **overrides})
    source = f"step {step} of {checkpoints.checkpoint_dir(path)}"
    lower = tokenization.lower_case(lower)
    return Pretrained(config, params, source, lower, tokenizer or None, vocab, step=step)


def _from_hf(path, overrides, vocab_file, do_lower_case) -> Pretrained:
    local = storage.local_dir(path)  # in a bucket: transformers' files are read from copies
    with storage.reported_as(local, path.rstrip("/")):  # errors name the bucket's files
        config, params, report, _ = bert.read_hf(local, None, overrides)  # no model built
    tok_config = _json_if_any(local, "tokenizer_config.json") or {}
    spec = _json_if_any(local, "tokenizer.json")
    own_vocab, own_lower, derived = _hf_vocabulary(local, tok_config, spec)
    google = not os.path.isfile(os.path.join(local, files.CONFIG_FILES[0]))  # Google's original
    if own_lower is None and google:  # google-research/bert's rule: a cased name is not lowered
        name = storage.basename(path if storage.is_url(path) else os.path.abspath(path))
        own_lower = False if _GOOGLE_CASED.search(name) else None
    if own_vocab and not vocab_file:
        _check_tokenizer_class(tok_config, path)
    vocab = vocab_file or own_vocab
    lower = do_lower_case if do_lower_case is not None else own_lower
    # What a saved config names: the directory's own file (in the bucket), not a local copy.
    own = own_vocab and storage.join(path, storage.basename(own_vocab))
    record = vocab_file or ("" if derived else own or "")
    # The directory's own file named (a fine-tuning run's record of it) reads as the directory's.
    given = bool(vocab_file) and vocab_file != own
    tokenizer = vocab and _tokenizer(vocab, lower, config.vocab_size, given=given)
    if isinstance(tokenizer, tokenization.WordPieceTokenizer) and not given and not google:
        tokenizer = HubWordPiece(tokenizer.vocab_file, lower, _max_chars_per_word(spec))
    lower = tokenization.lower_case(lower)
    fresh = tuple(report.initialized)
    return Pretrained(config, params, str(report), lower, tokenizer or None, record, fresh=fresh)


# Google's cased releases (cased_L-12_H-768_A-12, multi_cased_...): only the name says so.
_GOOGLE_CASED = re.compile(r"(?:^|_)cased_L-\d+_H-\d+_A-\d+$")


def fits_table(vocab_size: int, rows: int) -> bool:
    """Whether `vocab_size` entries fit a `rows`-row embedding table padded by 127 rows at most."""
    return rows - 128 < vocab_size <= rows


def _tokenizer(vocab: str, lower, rows: int, *, run_data=None, given: bool = True):
    """The tokenizer of `vocab`, checked against a run's recorded vocabulary (`run_data`: its
    config.data; md5, else size) and the model's `rows` word embeddings. `given`: the user named
    `vocab`."""
    lower = tokenization.lower_case(lower)
    why = storage.not_a_file(vocab)
    if why:
        if run_data is not None:
            why += ("" if given else " (the one the run's data recorded)") + (
                "; pass --vocab_file=PATH/vocab.txt, the vocabulary the training data was "
                "tokenized with"
            )
        raise cli.UserError(f"vocab file {vocab!r} {why}")
    tokenizer = tokenization.make_tokenizer(vocab, do_lower_case=lower)
    size = tokenizer.vocab_size
    if run_data is not None:
        recorded_md5 = run_data.get("vocab_md5") or ""
        recorded_size = int(run_data.get("vocab_size") or 0)
        problem = None
        if recorded_md5:
            md5 = storage.md5(vocab)
            if md5 != recorded_md5:
                problem = f"md5 {md5}, {size} entries; the run's data: md5 {recorded_md5}"
        elif recorded_size and size != recorded_size:
            problem = f"{size} entries; the run's data had {recorded_size}"
        elif not recorded_size and not fits_table(size, rows):
            problem = f"{size} entries; the model's word-embedding table has {rows} rows"
        if problem:
            raise cli.UserError(
                f"vocab file {vocab!r} is not the vocabulary this run was trained with "
                f"({problem}); pass the vocab.txt its training data was tokenized with"
            )
    # A directory's own vocabulary may leave rows unused; one the user names must fit the table.
    if size > rows or (given and not fits_table(size, rows)):
        raise cli.UserError(
            f"the vocabulary {tokenizer.vocab_file!r} has {size} entries but the model "
            f"{rows} word embeddings: pass the model's own vocab.txt"
        )
    return tokenizer


def _json_if_any(model_dir: str, name: str) -> dict | None:
    path = os.path.join(model_dir, name)
    return files.read_json(path) if os.path.isfile(path) else None


def _hf_vocabulary(
    model_dir: str, tok_config: dict, spec: dict | None
) -> tuple[str | None, bool | None, bool]:
    """(vocab.txt or tokenizer.json, do_lower_case or None, whether the file was derived)."""
    lower = tok_config.get("do_lower_case")
    options = {
        k: tok_config[k] for k in ("strip_accents", "tokenize_chinese_chars") if k in tok_config
    }
    vocab = os.path.join(model_dir, "vocab.txt")
    tokenizer_json = os.path.join(model_dir, "tokenizer.json")
    if os.path.isfile(vocab):
        if _full_tokenizer_rules(lower, **options) and not _added_tokens(spec):
            return vocab, lower, False
        # Options or added tokens a vocab.txt does not carry: the directory's tokenizer.json,
        # else one built to transformers' rules.
        if spec is not None:
            return tokenizer_json, lower, False
        return _bert_tokenizer_json(model_dir, vocab, lower, options), lower, True
    if spec is None:
        return None, lower, False
    # transformers 5 saves only tokenizer.json: a standard WordPiece one is read as a vocab.txt
    # (by HubWordPiece), any other as it is (text.tokenizer_json).
    model_spec = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if model_spec.get("type") != "WordPiece":
        return tokenizer_json, lower, False
    norm = spec.get("normalizer") if isinstance(spec.get("normalizer"), dict) else {}
    if lower is None:
        lower = norm.get("lowercase")
    pre = spec.get("pre_tokenizer") if isinstance(spec.get("pre_tokenizer"), dict) else {}
    standard = norm.get("type") == "BertNormalizer" and norm.get("clean_text", True) is True
    standard = standard and pre.get("type") == "BertPreTokenizer"
    standard = standard and model_spec.get("continuing_subword_prefix", "##") == "##"
    standard = standard and model_spec.get("unk_token", tokenization.UNK) == tokenization.UNK
    standard = standard and _full_tokenizer_rules(
        lower, norm.get("strip_accents"), norm.get("handle_chinese_chars", True)
    )
    if not standard or not _full_tokenizer_rules(lower, **options) or _added_tokens(spec):
        return tokenizer_json, lower, False
    table = model_spec.get("vocab") if isinstance(model_spec.get("vocab"), dict) else {}
    ids = sorted(table.values()) if all(isinstance(i, int) for i in table.values()) else None
    if ids != list(range(len(table))):
        raise cli.UserError(
            f"{tokenizer_json}'s WordPiece vocabulary does not number its entries 0, 1, 2, ...; "
            "pass the model's vocab.txt"
        )
    vocab = os.path.join(_scratch_dir(), f"{abs(hash(os.path.abspath(model_dir)))}-vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in sorted(table, key=table.get))
    return vocab, lower, True


class HubWordPiece(tokenization.WordPieceTokenizer):
    """A Hugging Face directory's WordPiece vocabulary, its text encoded as transformers'
    BertTokenizer does, not FullTokenizer (their ids differ on a few inputs)."""

    def __init__(self, vocab_file: str, do_lower_case, max_chars_per_word: int):
        super().__init__(vocab_file, tokenization.lower_case(do_lower_case))
        self.max_chars_per_word = max_chars_per_word
        self._rules = tokenization.bert_wordpiece(
            self.vocab, self.do_lower_case, max_chars_per_word=max_chars_per_word
        )

    def _encoding(self, text: str):
        try:
            return self._rules.encode(text, add_special_tokens=False)
        except TypeError:  # a lone surrogate ("\ud83d": half an emoji, from a JSON escape)
            text = text.encode(errors="ignore").decode()  # UTF-8 holds every other code point
            return self._rules.encode(text, add_special_tokens=False)

    def tokenize(self, text: str) -> list[str]:
        return self._encoding(text).tokens

    def encode(self, text: str) -> list[int]:
        return self._encoding(text).ids

    def encode_batch(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return concatenated([self.encode(line) for line in lines])


def _max_chars_per_word(spec: dict | None) -> int:
    """tokenizer.json's max_input_chars_per_word, else transformers' 100."""
    model_spec = (spec or {}).get("model")
    value = model_spec.get("max_input_chars_per_word") if isinstance(model_spec, dict) else 0
    return value if isinstance(value, int) and value > 0 else 100


def _check_tokenizer_class(tok_config: dict, shown: str) -> None:
    """Refuses cl-tohoku's Japanese tokenizer, whose ids would differ silently."""
    name = tok_config.get("tokenizer_class")
    if name == "BertJapaneseTokenizer":
        raise cli.UserError(
            f"{shown}: tokenizer_config.json's tokenizer_class {name!r} is not supported (its "
            "MeCab or character word splitting is not BERT's WordPiece rules, so the ids would "
            "differ from transformers'); name the vocabulary explicitly (embed's --vocab_file, "
            "fine-tuning's --config.data.vocab_file) to tokenize with BERT's rules anyway"
        )


def _added_tokens(spec: dict | None) -> list[str]:
    """The tokens a tokenizer.json adds besides BERT's special ones (read whole by transformers)."""
    added = (spec or {}).get("added_tokens")
    return [
        t.get("content")
        for t in (added if isinstance(added, list) else [])
        if isinstance(t, dict) and t.get("content") not in tokenization.SPECIAL_TOKENS
    ]


def _full_tokenizer_rules(lower, strip_accents=None, tokenize_chinese_chars=True) -> bool:
    """Whether a BertTokenizer's options are FullTokenizer's (accents follow lower-casing)."""
    lower = tokenization.lower_case(lower)
    return strip_accents in (None, lower) and tokenize_chinese_chars in (None, True)


def _bert_tokenizer_json(model_dir: str, vocab: str, lower, options: dict) -> str:
    """A tokenizer.json of `vocab` with BertTokenizer's rules and `options`, in scratch."""
    tok = tokenization.bert_wordpiece(
        tokenization.load_vocab(vocab),
        tokenization.lower_case(lower),
        strip_accents=options.get("strip_accents"),
        tokenize_chinese_chars=options.get("tokenize_chinese_chars") is not False,
    )
    path = os.path.join(_scratch_dir(), f"{abs(hash(os.path.abspath(model_dir)))}-tokenizer.json")
    tok.save(path)
    return path


@functools.cache
def _scratch_dir() -> str:
    """This process's directory for derived vocabularies, removed at exit."""
    path = tempfile.mkdtemp(prefix="bert_jax-vocab-")
    atexit.register(shutil.rmtree, path, True)
    return path
