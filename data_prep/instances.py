"""Training instances from tokenized documents: NSP pairing, truncation, MLM masking.

These functions follow google-research/bert's create_pretraining_data.py step for step, including
the order of every call on the random generator, so that the same seed gives the same records. They
work on token ids rather than strings (faster, and what the records hold). The random generator is
always passed in: reference mode threads one `random.Random` through the whole corpus, the scaled
job seeds one per (shard, document) so its output does not depend on the number of workers.

A document is a list of sentences; a sentence is a list of token ids.
"""

import dataclasses
import random
from collections.abc import Sequence
from typing import NamedTuple


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are built; the defaults are the original generator's flag defaults."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    nsp: bool = True  # False: MLM-only, one segment of contiguous sentences filled to full length
    mask: bool = True  # False: unmasked records; the trainer masks on the fly (dynamic masking)

    def __post_init__(self):
        min_length = 5 if self.nsp else 3  # special tokens plus one token per segment
        if self.max_seq_length < min_length:
            raise ValueError(f"max_seq_length={self.max_seq_length} leaves no room for text")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob={self.masked_lm_prob} must be in (0, 1]")
        if self.mask and self.max_predictions_per_seq < 1:
            raise ValueError("max_predictions_per_seq must be at least 1 for masked records")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob={self.short_seq_prob} must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Vocab:
    """What masking needs to know about the vocabulary, as ids."""

    cls_id: int
    sep_id: int
    mask_id: int
    random_ids: Sequence[int]  # the original draws random replacements from every vocab entry
    continuation: frozenset  # ids of pieces that continue a word ("##ing"), for whole-word masking

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "Vocab":
        words = tokenizer.vocab_words
        return cls(
            cls_id=tokenizer.cls_id,
            sep_id=tokenizer.sep_id,
            mask_id=tokenizer.mask_id,
            random_ids=[tokenizer.vocab[w] for w in words],
            continuation=frozenset(
                tokenizer.vocab[w] for w in words if tokenizer.is_continuation(w)
            ),
        )


class Instance(NamedTuple):
    tokens: list  # ids, [CLS] A [SEP] B [SEP], with masked positions already replaced
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list  # sorted
    masked_lm_labels: list  # original ids at those positions


def truncate_seq_pair(
    tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random
) -> None:
    """Trims the longer segment, from the front or the back at random, until the pair fits."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def create_masked_lm_predictions(
    tokens: list, opts: InstanceOptions, vocab: Vocab, rng: random.Random
):
    """Masks `masked_lm_prob` of the tokens: 80% [MASK], 10% unchanged, 10% a random vocab entry.

    Returns (output_tokens, positions, labels) with positions sorted. [CLS] and [SEP] are never
    masked; with whole-word masking a word's pieces are masked together or not at all.
    """
    cand_indexes: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token == vocab.cls_id or token == vocab.sep_id:
            continue
        if opts.do_whole_word_mask and cand_indexes and token in vocab.continuation:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)

    output = list(tokens)
    num_to_predict = min(
        opts.max_predictions_per_seq, max(1, round(len(tokens) * opts.masked_lm_prob))
    )
    masked: list[tuple[int, int]] = []
    covered: set[int] = set()
    for index_set in cand_indexes:
        if len(masked) >= num_to_predict:
            break
        # A whole word that would overshoot the budget is skipped, not split.
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:
                replacement = vocab.mask_id
            elif rng.random() < 0.5:
                replacement = tokens[index]
            else:
                replacement = vocab.random_ids[rng.randint(0, len(vocab.random_ids) - 1)]
            output[index] = replacement
            masked.append((index, tokens[index]))
    masked.sort()
    return output, [i for i, _ in masked], [label for _, label in masked]


def _make_instance(tokens_a, tokens_b, is_random_next, opts, vocab, rng) -> Instance:
    tokens = [vocab.cls_id, *tokens_a, vocab.sep_id]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, vocab.sep_id]
        segment_ids += [1] * (len(tokens_b) + 1)
    if not opts.mask:
        return Instance(tokens, segment_ids, is_random_next, [], [])
    tokens, positions, labels = create_masked_lm_predictions(tokens, opts, vocab, rng)
    return Instance(tokens, segment_ids, is_random_next, positions, labels)


def create_instances_from_document(
    all_documents: Sequence[list],
    document_index: int,
    opts: InstanceOptions,
    vocab: Vocab,
    rng: random.Random,
) -> list[Instance]:
    """Instances from one document; random next sentences come from the other documents."""
    if not opts.nsp:
        return _mlm_only_instances(all_documents[document_index], opts, vocab, rng)
    document = all_documents[document_index]
    max_num_tokens = opts.max_seq_length - 3  # [CLS], [SEP], [SEP]
    # Mostly full-length sequences, sometimes short ones so that fine-tuning on short inputs
    # matches.
    target_seq_length = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances = []
    current_chunk: list[list[int]] = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for sentence in current_chunk[:a_end] for t in sentence]
                tokens_b: list[int] = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Ten tries for another document; a one-document corpus ends up using itself.
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The sentences of this chunk that B did not use go back for the next instance.
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    tokens_b = [t for sentence in current_chunk[a_end:] for t in sentence]
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                if tokens_a and tokens_b:
                    instances.append(
                        _make_instance(tokens_a, tokens_b, is_random_next, opts, vocab, rng)
                    )
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def _mlm_only_instances(
    document: list, opts: InstanceOptions, vocab: Vocab, rng: random.Random
) -> list[Instance]:
    """RoBERTa-style: contiguous sentences of one document packed up to the full length, one
    segment."""
    max_num_tokens = opts.max_seq_length - 2  # [CLS], [SEP]
    target = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    instances, chunk = [], []
    for index, sentence in enumerate(document):
        chunk.extend(sentence)
        if len(chunk) >= target or index == len(document) - 1:
            if len(chunk) > max_num_tokens:  # a long sentence: keep its start, as truncation would
                chunk = chunk[:max_num_tokens]
            if chunk:
                instances.append(_make_instance(chunk, [], False, opts, vocab, rng))
            chunk = []
    return instances


def create_training_instances(
    documents: list, opts: InstanceOptions, vocab: Vocab, dupe_factor: int, rng: random.Random
) -> list[Instance]:
    """The original generator's whole-corpus procedure (reference mode).

    Shuffles the documents, makes `dupe_factor` passes over them (each with fresh random choices),
    then shuffles all instances. Holds everything in memory, exactly like the original.
    """
    documents = [d for d in documents if d]
    rng.shuffle(documents)
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(documents)):
            instances.extend(
                create_instances_from_document(documents, document_index, opts, vocab, rng)
            )
    rng.shuffle(instances)
    return instances
