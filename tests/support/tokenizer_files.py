"""Hugging Face tokenizer.json files trained in the test from the bundled corpus (no downloads):
one per kind a user brings.

    bpe       data_prep.vocab's own: byte-level BPE, BERT-style [CLS] [SEP] [MASK] (ModernBERT's
              layout), "[CLS] $A [SEP]" template
    roberta   byte-level BPE with add_prefix_space, <s> </s> <mask> <pad> <unk>, RobertaProcessing
    unigram   SentencePiece-style Unigram (Metaspace "▁"), RoBERTa-style special tokens, a
              "<s> $A </s>" template
    wordpiece BERT's normalizer and pre-tokenizer, "##" pieces, no post-processor (special tokens
              by name)
    plain     BPE with a Whitespace pre-tokenizer: its pieces mark no word boundaries
"""

import functools

from support.golden import TESTDATA

KINDS = ("bpe", "roberta", "unigram", "wordpiece")


@functools.cache
def corpus_lines() -> tuple[str, ...]:
    """The bundled prose, one line a sentence (blank lines between documents dropped)."""
    lines = []
    for name in ("sample_text.txt", "pydocs_small.txt"):
        text = (TESTDATA / name).read_text(encoding="utf-8")
        lines += [line for line in text.split("\n") if line.strip()]
    return tuple(lines)


def make(kind: str, path, vocab_size: int = 2000) -> str:
    """Trains a tokenizer.json of `kind` on corpus_lines() and writes it to `path`."""
    import tokenizers
    from tokenizers import models, pre_tokenizers, processors, trainers

    path = str(path)
    lines = list(corpus_lines())
    if kind == "bpe":
        from data_prep import vocab

        return vocab.train_bpe(lines, path, vocab_size, do_lower_case=False)
    roberta_special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    if kind == "roberta":
        tok = tokenizers.ByteLevelBPETokenizer(add_prefix_space=True)
        tok.train_from_iterator(
            lines, vocab_size=vocab_size, special_tokens=roberta_special, show_progress=False
        )
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
        )
    elif kind == "unigram":
        tok = tokenizers.SentencePieceUnigramTokenizer()
        tok.train_from_iterator(
            lines,
            vocab_size=vocab_size,
            special_tokens=["<pad>", "<unk>", "<s>", "</s>", "<mask>"],
            unk_token="<unk>",
            show_progress=False,
        )
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>",
            special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))],
        )
    elif kind == "wordpiece":
        tok = tokenizers.BertWordPieceTokenizer(lowercase=True)
        tok.train_from_iterator(
            lines,
            vocab_size=vocab_size,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        )
    elif kind == "plain":
        tok = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(
            lines,
            trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                show_progress=False,
            ),
        )
    else:
        raise ValueError(kind)
    tok.save(path)
    return path
