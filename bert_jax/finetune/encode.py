"""Text -> fixed-length model inputs for sentence (pair) classification and token tagging, laid
out as google-research/bert's (`[CLS] a [SEP] b [SEP]`); SQuAD's windows are squad.py's.
"""

import math
from collections.abc import Sequence

import numpy as np

from bert_jax import cli
from bert_jax.data.contract import features as F

INPUTS = (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS)  # the model's: int32 [examples, length]
LABEL = "label"  # [examples]: class id or regression target
LABEL_IDS = "label_ids"  # [examples, length]: tag id at the first piece of each word
LABEL_WEIGHTS = "label_weights"  # [examples, length]: 1.0 where label_ids counts


class FormatError(cli.UserError):
    """A data file without the expected layout; the message says where and what to fix."""


def pack(
    tok, ids_a: Sequence[int], ids_b: Sequence[int] | None, max_seq_length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[CLS] a [SEP] (b [SEP]) -> (input_ids, input_mask, segment_ids), each [max_seq_length]."""
    ids = [tok.cls_id, *ids_a, tok.sep_id]
    segments = [0] * len(ids)
    if ids_b is not None:
        ids += [*ids_b, tok.sep_id]
        segments += [1] * (len(ids_b) + 1)
    if len(ids) > max_seq_length:
        raise ValueError(
            f"{len(ids)} tokens do not fit max_seq_length={max_seq_length}; truncate first"
        )
    out = np.zeros((3, max_seq_length), np.int32)
    if tok.pad_id:
        out[0, :] = tok.pad_id
    out[0, : len(ids)] = ids
    out[1, : len(ids)] = 1
    out[2, : len(segments)] = segments
    return out[0], out[1], out[2]


def encode_texts(
    tok, examples, max_seq_length: int, labels: Sequence[str]
) -> dict[str, np.ndarray]:
    """TextExamples -> inputs and labels (floats if `labels` is (); 0 where an example has none)."""
    F.check_seq_length(max_seq_length, 2)  # a pair's room, also for single texts
    label_map = {name: i for i, name in enumerate(labels)}
    n = len(examples)
    arrays = {name: np.zeros((n, max_seq_length), np.int32) for name in INPUTS}
    out_labels = np.zeros(n, np.int32 if labels else np.float32)
    for i, ex in enumerate(examples):
        a = tok.encode(ex.text_a)
        b = tok.encode(ex.text_b) if ex.text_b is not None else None
        if b is None:
            del a[max_seq_length - 2 :]
        else:
            while len(a) + len(b) > max_seq_length - 3:  # run_classifier.py's rule
                (a if len(a) > len(b) else b).pop()  # the longer (b on a tie) loses a piece
        for name, row in zip(INPUTS, pack(tok, a, b, max_seq_length)):
            arrays[name][i] = row
        if ex.label is not None:
            out_labels[i] = _label_value(ex, label_map)
    arrays[LABEL] = out_labels
    return arrays


def _label_value(ex, label_map):
    # The file's line: an index column's id (MNLI's "17") is not where to look.
    where = f"line {ex.line}, example {ex.guid}" if ex.line else f"example {ex.guid}"
    if not label_map:
        try:
            value = float(ex.label)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):  # "nan" and "inf" parse, and would train on a NaN loss
            raise FormatError(f"{where}: regression target {ex.label!r} is not a finite number")
        return value
    if ex.label not in label_map:
        raise FormatError(
            f"{where}: label {ex.label!r} is not one of {sorted(label_map)} "
            "(config.data.labels, or the layout's label set)"
        )
    return label_map[ex.label]


def encode_tagged(
    tok, sentences, max_seq_length: int, labels: Sequence[str]
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """TaggedSentences -> (inputs and tag labels, each word's first-piece position per sentence):
    a tag sits on its word's first piece (all else weighs 0); a word cut off has position -1."""
    F.check_seq_length(max_seq_length, 1)
    label_map = {name: i for i, name in enumerate(labels)}
    n = len(sentences)
    arrays = {name: np.zeros((n, max_seq_length), np.int32) for name in (*INPUTS, LABEL_IDS)}
    arrays[LABEL_WEIGHTS] = np.zeros((n, max_seq_length), np.float32)
    starts = []
    for i, sentence in enumerate(sentences):
        ids, first = [], np.full(len(sentence.words), -1, np.int64)
        for w, word in enumerate(sentence.words):
            pieces = tok.encode(word) or [tok.unk_id]  # a word of deleted characters: [UNK]
            if 1 + len(ids) >= max_seq_length - 1:
                break  # no room for this word's first piece before [SEP]
            first[w] = 1 + len(ids)  # +1 for [CLS]
            ids.extend(pieces)
        del ids[max_seq_length - 2 :]
        for name, row in zip(INPUTS, pack(tok, ids, None, max_seq_length)):
            arrays[name][i] = row
        starts.append(first)
        if sentence.tags is None:
            continue
        for w, pos in enumerate(first):
            if pos < 0:
                continue
            tag = sentence.tags[w]
            if tag not in label_map:
                where = f"line {sentence.line + w}" if sentence.line else "sentence"
                raise FormatError(
                    f"{where} (sentence {sentence.guid}): tag {tag!r} is not one of "
                    f"{list(labels)} (config.data.labels, or the training file's tags)"
                )
            arrays[LABEL_IDS][i, pos] = label_map[tag]
            arrays[LABEL_WEIGHTS][i, pos] = 1.0
    return arrays, starts


def word_predictions(
    token_preds: np.ndarray, starts: Sequence[np.ndarray], labels: Sequence[str]
) -> list[list[str]]:
    """Per-token predicted ids [examples, length] -> per-word tag names (cut words: "O")."""
    return [
        [labels[int(row[p])] if p >= 0 else "O" for p in first]
        for row, first in zip(token_preds, starts)
    ]
