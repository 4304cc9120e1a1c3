"""Reference mode: google-research/bert's create_pretraining_data.py, step for step (down to the
calls on the one random.Random, so the records are the original's), on token ids: the
specification the default path (instances.py, masking.py) is tested against.
"""

import dataclasses
import itertools
import logging
import random
import time
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from bert_jax import storage
from bert_jax.data.contract import features as F
from bert_jax.data.contract import manifest, record_io
from bert_jax.data.input.masking import Vocab
from bert_jax.storage import workdir_lock
from data_prep import inputs, lines, output, readers
from data_prep import job as job_lib
from data_prep.instances import InstanceOptions


class Instance(NamedTuple):
    tokens: list  # ids, [CLS] A [SEP] B [SEP], with masked positions already replaced
    segment_ids: list
    is_random_next: bool
    masked_lm_positions: list  # sorted
    masked_lm_labels: list  # original ids at those positions


def truncate_seq_pair(
    tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random
) -> None:
    """Trims the longer segment, from the front or the back at random, until the pair fits: the
    original's coin per token, the lists cut once (its `del trunc[0]` was quadratic)."""
    ends = [[0, len(tokens_a)], [0, len(tokens_b)]]
    (lo_a, hi_a), (lo_b, hi_b) = ends
    while (hi_a - lo_a) + (hi_b - lo_b) > max_num_tokens:
        trunc = ends[0] if hi_a - lo_a > hi_b - lo_b else ends[1]
        if rng.random() < 0.5:
            trunc[0] += 1
        else:
            trunc[1] -= 1
        (lo_a, hi_a), (lo_b, hi_b) = ends
    tokens_a[:] = tokens_a[lo_a:hi_a]
    tokens_b[:] = tokens_b[lo_b:hi_b]


def create_masked_lm_predictions(
    tokens: list, opts: InstanceOptions, vocab: Vocab, rng: random.Random
):
    """Masks `masked_lm_prob` of the tokens but [CLS] and [SEP]: 80% [MASK], 10% unchanged, 10% a
    random vocab entry; whole-word masking masks a word's pieces together or not at all. Returns
    (output_tokens, positions, labels) with positions sorted."""
    # Whether a piece continues the word before it: "##" for WordPiece (the original's test).
    joins = vocab.continues(np.asarray([tokens]))[0] if opts.whole_word_mask else None
    cand_indexes: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token == vocab.cls_id or token == vocab.sep_id:
            continue
        if opts.whole_word_mask and cand_indexes and joins[i]:
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
                    # The chunk's sentences B did not use go back for the next instance.
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
    """RoBERTa-style: contiguous sentences packed up to the full length, one segment; a chunk past
    the row goes on into the next record: no token is dropped."""
    max_num_tokens = opts.max_seq_length - 2  # [CLS], [SEP]
    target = max_num_tokens
    if rng.random() < opts.short_seq_prob:
        # max_seq_length 3 leaves room for one token: randint(2, 1) has no value.
        target = rng.randint(min(2, max_num_tokens), max_num_tokens)
    instances, chunk = [], []
    for index, sentence in enumerate(document):
        chunk.extend(sentence)
        while len(chunk) > max_num_tokens:
            instances.append(_make_instance(chunk[:max_num_tokens], [], False, opts, vocab, rng))
            chunk = chunk[max_num_tokens:]
        if chunk and (len(chunk) >= target or index == len(document) - 1):
            instances.append(_make_instance(chunk, [], False, opts, vocab, rng))
            chunk = []
    return instances


def create_training_instances(
    documents: list, opts: InstanceOptions, vocab: Vocab, dupe_factor: int, rng: random.Random
) -> list[Instance]:
    """Shuffles the documents, makes `dupe_factor` passes over them, then shuffles the instances."""
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


def instance_to_features(instance: Instance, schema: F.Schema) -> dict:
    """write_instance_to_example_files' features, 0-padded; unmasked schemas have no masked_*."""
    n, length = len(instance.tokens), schema.max_seq_length
    if n > length:
        raise ValueError(f"instance has {n} tokens, more than max_seq_length={length}")
    pad = [0] * (length - n)
    out = {
        F.INPUT_IDS: list(instance.tokens) + pad,
        F.INPUT_MASK: [1] * n + pad,
        F.SEGMENT_IDS: list(instance.segment_ids) + pad,
    }
    if schema.masked:
        p = len(instance.masked_lm_positions)
        mpad = [0] * (schema.max_predictions_per_seq - p)
        out[F.MASKED_LM_POSITIONS] = list(instance.masked_lm_positions) + mpad
        out[F.MASKED_LM_IDS] = list(instance.masked_lm_labels) + mpad
        out[F.MASKED_LM_WEIGHTS] = [1.0] * p + [0.0] * len(mpad)
    out[F.NEXT_SENTENCE_LABELS] = [1 if instance.is_random_next else 0]
    return out


def tokenize_document(document: list[str], tokenizer) -> list[list[int]]:
    """Sentences -> ids, those with no tokens dropped; later sentences with the tokenizer's
    sentence_joiner before them (a tokenizer.json's " "), as scaled mode encodes them."""
    joiner = getattr(tokenizer, "sentence_joiner", "")
    out = []
    for index, sentence in enumerate(document):
        ids = tokenizer.encode(joiner + sentence if index and joiner else sentence)
        if ids:
            out.append(ids)
    return out


def _previous_shards(output_dir: str) -> set[str]:
    """The shard files of a reference output in `output_dir` (a rerun replaces them); an error
    for a scaled or Beam job's output, finished or not."""
    finished = output.read_manifest(output_dir) or {}
    unfinished = storage.exists(storage.join(output_dir, manifest.WORK_DIR))
    # A version-1 manifest named its mode among its flags only.
    mode = finished.get("mode") or (finished.get("flags") or {}).get("mode", "reference")
    if unfinished or mode != "reference":
        what = (
            f"an unfinished --mode=scaled or beam job ({manifest.WORK_DIR})"
            if unfinished
            else f"a finished --mode={mode} job"
        )
        raise output.OutputError(
            f"--output_dir={output_dir!r} holds {what}; reference mode would leave its shards "
            "there beside its own: use another --output_dir"
        )
    return {s["file"] for split in finished.get("shards", {}).values() for s in split}


def run(
    specs: list[str],
    tokenizer,
    opts: InstanceOptions,
    *,
    dupe_factor: int,
    seed: int,
    output_dir: str,
    fmt: str,
    flags: dict,
    text_field: str = inputs.TEXT_FIELD,
    tfds_data_dir: str | None = None,
    vocab_file: str | None = None,
) -> dict:
    """The original generator, record for record: returns the manifest it writes (a rerun writes
    it all again) under the output directory's lock, as the scaled and Beam jobs, after the
    temporary files of a killed job are removed. `vocab_file`: the vocabulary as the user named
    it (not a local copy)."""
    output.prepare_output_dir(output_dir)
    with workdir_lock.hold(output_dir, "data_prep.main", flag="--output_dir"):
        if not storage.is_url(output_dir):
            output.remove_temporaries(output_dir)
        start = time.time()
        vocab = Vocab.from_tokenizer(tokenizer)
        vocab.check_whole_word(opts.whole_word_mask and opts.mask, "--vocab_file")
        previous = _previous_shards(output_dir)
        sources = readers.parse_input(specs, match=job_lib.outside(output_dir))
        read_stats = readers.ReadStats()
        # The original reads all files as one line stream: a document may run across files.
        text_lines = itertools.chain.from_iterable(
            inputs.read_lines(s.path, read_stats, drop_cr=True, bom_line=True)
            for s in sources
            if s.kind == "text"
        )
        raw_docs = itertools.chain(
            lines.text_documents(text_lines, read_stats),
            *(
                readers.documents(s, read_stats, text_field, tfds_data_dir)
                for s in sources
                if s.kind != "text"
            ),
        )
        documents = [tokenize_document(d, tokenizer) for d in raw_docs]
        logging.info("read %d documents in %.1fs", len(documents), time.time() - start)

        instances = create_training_instances(
            documents, opts, vocab, dupe_factor, random.Random(seed)
        )
        if not instances:  # as scaled mode: an empty output only fails later, in the trainer
            raise job_lib.no_instances_error(specs, text_field, [dataclasses.asdict(read_stats)])
        schema = opts.schema
        stats = output.InstanceStats()
        path = storage.join(output_dir, output.shard_name("train", 0, 1, fmt))
        # The manifest goes first: no manifest ever describes shards of another run.
        manifest_path = storage.join(output_dir, manifest.FILE)
        storage.remove(manifest_path)
        for name in previous - {storage.basename(path)}:  # another format's: no manifest names it
            storage.remove(storage.join(output_dir, name))
        with output.local_file(path) as local:
            with record_io.RecordWriter(local, fmt) as writer:
                for instance in instances:
                    writer.write(F.encode_example(instance_to_features(instance, schema)))
                    stats.instances += 1
                    stats.tokens += len(instance.tokens)
                    stats.masked += len(instance.masked_lm_positions)
                    stats.random_next += int(instance.is_random_next)
            shard = output.shard_entry(local, stats.instances)
        vocab_entry = manifest.vocab_entry(tokenizer, file=vocab_file)
        fields = opts.contract_fields("reference", fmt, vocab_entry, {"train": [shard], "eval": []})
        fields.update(
            flags=flags,
            read=dataclasses.asdict(read_stats),
            documents=sum(1 for d in documents if d),
            stats=stats.summary(opts.max_seq_length),
            seconds=round(time.time() - start, 3),
        )
        output.write_json_atomic(manifest_path, fields)
        return fields
