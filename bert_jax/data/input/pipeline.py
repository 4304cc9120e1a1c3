"""Record shards -> Grain -> host-local numpy batches (train: endless, shuffled; eval: one pass),
from a config.data that data_facts.resolve filled in. Train batches are a pure function of (seed,
step), so a saved iterator position replays them. docs/training.md, "Input pipeline".
"""

import bisect
import dataclasses
from collections.abc import Sequence

import grain
import numpy as np

from bert_jax import cli, storage
from bert_jax.data.contract import data_facts, features, record_io, shard_files
from bert_jax.data.input import bad_records, growing_batches, masking, packed_records, sources

# Added to eval batches: 1 for a real example, 0 for the padding that fills the last batch.
EXAMPLE_WEIGHT = "example_weight"
# Added to every record: 1.0 for an NSP pair, 0.0 for MLM-only records (NSP loss skips them).
NEXT_SENTENCE_WEIGHTS = "next_sentence_weights"


def _import_proto() -> None:
    # tfds' lazy imports deadlock when several Grain reader threads decode first: import here.
    features.encode_example({})


class ParseRecord(grain.transforms.MapWithIndex):
    """Serialized tf.train.Example -> checked arrays; before the shuffle: errors name the file."""

    def __init__(
        self,
        schema: features.Schema,
        vocab_size: int,
        files: Sequence[str],
        counts: Sequence[int],
        nsp: bool = True,
        skip_damaged: bool = False,
        special: tuple[int, int] = (0, 0),
        type_vocab_size: int = 0,  # the model's token types (0: it reads no segment_ids)
    ):
        self.schema, self.type_vocab_size = schema, type_vocab_size
        self.nsp = nsp
        self.vocab_size = vocab_size
        self.files = list(files)
        self.starts = np.cumsum([0, *counts]).tolist()  # global index of each file's first record
        self.skip_damaged = skip_damaged
        self.special = special  # ([CLS], [SEP]) ids: the blank record that stands for a bad one
        _import_proto()

    def __setstate__(self, state):  # in a Grain worker process
        self.__dict__.update(state)
        _import_proto()

    def name(self, index: int) -> str:
        """The shard and record of source index `index` (BAD_RECORD - 1), for a message."""
        i = bisect.bisect_right(self.starts, index) - 1
        return f"{self.files[i]} (record {index - self.starts[i]})"

    def map_with_index(self, index: int, record) -> dict[str, np.ndarray]:
        # Past the first epoch Grain passes the index in the repeated stream.
        index %= self.starts[-1]
        if isinstance(record, record_io.DamagedRecord):  # CheckedSource, with skip_damaged
            return self._blank(index)
        try:
            example = features.decode_example(record)
        except Exception as e:  # protobuf's DecodeError: a damaged record
            if self.skip_damaged:
                return self._blank(index)
            raise record_io.DamagedRecord(
                f"{self.name(index)} is not a tf.train.Example ({e}); the file is damaged",
                self.files[bisect.bisect_right(self.starts, index) - 1],
                index,
            ) from e
        self._check(index, example)
        out = {  # the schema's features, which _check found in the example
            name: example[name].astype(np.float32 if name in features.FLOAT_FEATURES else np.int32)
            for name in self.schema.lengths()
        }
        out[features.NEXT_SENTENCE_LABELS] = np.int32(example[features.NEXT_SENTENCE_LABELS][0])
        out[NEXT_SENTENCE_WEIGHTS] = np.float32(self.nsp)
        if self.skip_damaged:
            out[bad_records.BAD_RECORD] = np.int64(0)
        return out

    def _check(self, index: int, example: dict) -> None:
        if not self.schema.masked and features.MASKED_LM_POSITIONS in example:
            raise cli.UserError(
                f"dynamic masking needs unmasked records, but {self.name(index)} is already "
                "masked: set config.data.dynamic_masking=False"
            )
        missing = features.missing_feature(example, masked=False)
        if missing:
            raise cli.UserError(
                f"{self.name(index)} has no {missing!r} feature (it has "
                f"{sorted(example) or 'none of the BERT features'}): not a BERT pre-training "
                "record; point config.data.train_files / eval_files at data_prep's output"
            )
        try:
            features.check_example(example, self.schema)
        except ValueError as e:
            if self.schema.masked and features.MASKED_LM_POSITIONS not in example:
                raise cli.UserError(
                    f"{self.name(index)} is unmasked (no masked_lm_* features): set "
                    "config.data.dynamic_masking=True to mask them while training"
                ) from e
            raise cli.UserError(
                f"{self.name(index)}: {e}; set config.data.max_seq_length / "
                "max_predictions_per_seq to the values the records were written with"
            ) from e
        problem = _bad_values(example, self.nsp)
        if problem:
            raise cli.UserError(
                f"{self.name(index)}: {problem}; the record was not written by data_prep or "
                "google-research/bert's generator, or the file is damaged"
            )
        for name in (features.INPUT_IDS, features.MASKED_LM_IDS):
            ids = example.get(name)
            if ids is not None and ids.size and (ids.max() >= self.vocab_size or ids.min() < 0):
                bad = ids[(ids >= self.vocab_size) | (ids < 0)][0]
                raise cli.UserError(
                    f"{self.name(index)}: {name} holds token id {bad}, outside the vocabulary "
                    f"of {self.vocab_size} ids: the records were tokenized with another "
                    "vocabulary (set config.model.vocab_size / data.vocab_size to match it) or "
                    "the file is damaged"
                )
        segments, types = example[features.SEGMENT_IDS], self.type_vocab_size
        bad = segments[(segments < 0) | (segments >= types)] if types else ()
        if len(bad):  # under JAX a row past the table is NaN, a negative one wraps
            raise cli.UserError(
                f"{self.name(index)}: segment_ids holds {bad[0]}, outside the model's {types} "
                "token types (config.model.type_vocab_size): the records were written for "
                "another model, or the file is damaged"
            )

    def _blank(self, index: int) -> dict[str, np.ndarray]:
        """A damaged record's stand-in: [CLS] [SEP], loss weights 0, its index in BAD_RECORD."""
        out = {
            name: np.zeros(length, np.float32 if name in features.FLOAT_FEATURES else np.int32)
            for name, length in self.schema.lengths().items()
        }
        out[features.INPUT_IDS][:2], out[features.INPUT_MASK][:2] = self.special, 1
        out[features.NEXT_SENTENCE_LABELS] = np.int32(0)
        out[NEXT_SENTENCE_WEIGHTS] = np.float32(0)
        out[bad_records.BAD_RECORD] = np.int64(index + 1)
        return out


def _bad_values(example: dict, nsp: bool) -> str | None:
    """What is wrong with a record's values that the model would take in silence, or None."""
    floats = [
        k for k, v in example.items() if v.dtype.kind == "f" and k not in features.FLOAT_FEATURES
    ]
    if floats:  # tf.io.parse_example refuses them too; astype(int32) cut 7.9 to 7
        return f"{floats[0]} holds floats, not whole numbers"
    mask = example[features.INPUT_MASK]
    n = int((mask != 0).sum())
    if n < 1 or (mask[:n] != 1).any() or (mask[n:] != 0).any():
        return "input_mask is not 1 on the first tokens (at least one) and 0 after them"
    weights = example.get(features.MASKED_LM_WEIGHTS)
    if weights is not None:
        positions = example[features.MASKED_LM_POSITIONS][weights != 0]
        if positions.size and (positions.min() < 0 or positions.max() >= n):
            bad = positions[(positions < 0) | (positions >= n)][0]
            return f"masked_lm_positions holds {bad}, outside the record's {n} tokens"
    label = example[features.NEXT_SENTENCE_LABELS][0]
    if nsp and label not in (0, 1):
        return f"next_sentence_labels is {label}, not 0 or 1"
    return None


# The random numbers DrawMasks attaches to a record, until ApplyMasks uses them.
_DRAWS = ("_mask_keys", "_mask_choice", "_mask_random")


class DrawMasks(grain.transforms.RandomMap):
    """Per record: the random numbers of its masking (masking.draw for one row)."""

    def __init__(self, opts: masking.Options, vocab: masking.Vocab, max_seq_length: int):
        self.opts, self.vocab, self.max_seq_length = opts, vocab, max_seq_length

    def random_map(self, example: dict, rng: np.random.Generator) -> dict:
        draws = masking.draw(rng, 1, self.max_seq_length, self.opts, self.vocab)
        return {**example, **dict(zip(_DRAWS, (draws.keys[0], draws.choice[0], draws.random[0])))}


class ApplyMasks(grain.transforms.Map):
    """Per batch (or record): masks input_ids by the draws and adds the masked_lm_* features."""

    def __init__(self, opts: masking.Options, vocab: masking.Vocab):
        self.opts, self.vocab = opts, vocab

    def map(self, batch: dict) -> dict:
        one = batch[features.INPUT_IDS].ndim == 1  # a record: a batch of one
        rows = {k: v[None] if one else v for k, v in batch.items()}
        draws = masking.Draws(*(rows.pop(name) for name in _DRAWS))
        lengths = rows[features.INPUT_MASK].sum(axis=-1)
        out = masking.apply(rows[features.INPUT_IDS], lengths, self.opts, self.vocab, draws)
        rows[features.INPUT_IDS] = out.tokens
        rows[features.MASKED_LM_POSITIONS] = out.positions
        rows[features.MASKED_LM_IDS] = out.labels
        rows[features.MASKED_LM_WEIGHTS] = out.weights()
        return {k: v[0] for k, v in rows.items()} if one else rows


def _records(
    data, files, split: str, vocab_size: int, type_vocab_size: int = 0
) -> tuple[grain.MapDataset, ParseRecord, data_facts.DataFacts]:
    """The parsed records of `files`, the parser (it names a damaged record) and the facts."""
    facts = data_facts.DataFacts.from_data(data)
    schema = facts.record_schema()
    shards = shard_files.find_shards(files, split)
    # Local copies of shards in a bucket: docs/scaling.md, "Buckets (gs:// and s3://)".
    local = storage.local_copies(shards.files, shards.md5, shards.nbytes, data.cache_dir or None)
    skip_damaged = data.bad_records == "skip"
    source, counts = sources.make_source(local, shards.instances, skip_damaged, shards.files)
    # The data's own vocabulary when known (an id past it is damage even below the table size).
    limit = facts.vocab_size or vocab_size
    special = tuple(facts.special_ids.get(k) or 0 for k in ("cls", "sep"))
    parse = ParseRecord(
        schema, limit, shards.files, counts, facts.nsp, skip_damaged, special, type_vocab_size
    )
    return grain.MapDataset.source(source).map_with_index(parse), parse, facts


def masking_rule(
    facts: data_facts.DataFacts, data, vocab_size: int
) -> tuple[DrawMasks, ApplyMasks]:
    """Dynamic masking's two Grain steps, over data.vocab_file's ids (none: ids < vocab_size)."""
    opts = masking.Options(
        facts.max_predictions_per_seq, facts.masked_lm_prob, bool(data.whole_word_mask)
    )
    limit = facts.vocab_size or vocab_size
    if data.vocab_file:
        vocab = masking.Vocab.from_file(data.vocab_file, data.do_lower_case)
        vocab.check_whole_word(opts.whole_word_mask, f"config.data.vocab_file={data.vocab_file!r}")
        if max(vocab.random_ids) >= limit:
            raise cli.UserError(
                f"config.data.vocab_file={data.vocab_file!r} has ids up to "
                f"{max(vocab.random_ids)}, beyond the vocabulary size {limit}; set "
                "config.model.vocab_size to the vocabulary the records were written with"
            )
    elif opts.whole_word_mask:
        raise cli.UserError(
            "config.data.whole_word_mask needs the vocabulary's word pieces: set "
            "config.data.vocab_file to the vocab.txt (.model, tokenizer.json) the records were "
            "written with"
        )
    else:
        vocab = masking.Vocab(0, 0, 0, range(limit), frozenset())
    # The special ids of the data contract (manifest or config) win over the file's.
    special = {f"{k}_id": v for k, v in facts.special_ids.items() if v is not None}
    vocab = dataclasses.replace(vocab, **special)
    return DrawMasks(opts, vocab, facts.max_seq_length), ApplyMasks(opts, vocab)


def _absl_flags_ready() -> None:
    """Grain's workers read an absl flag, which raises where absl.app never ran: grain#1355."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _check_split(what: str, global_batch_size: int, process_count: int) -> None:
    """For library callers (config_check refuses it first in the binaries): no rows lost."""
    if global_batch_size % process_count:
        raise cli.UserError(
            f"{what} {global_batch_size} is not divisible by {process_count} processes"
        )


def train_dataset(
    data,
    vocab_size: int,
    global_batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    batch_warmup=None,
    type_vocab_size: int = 0,
) -> grain.IterDataset:
    """Endless batches of this process's share, [global_batch / processes, ...] arrays; the
    iterator's get_state()/set_state() give the exact position. `batch_warmup` (an
    optim.BatchWarmup): batches grown from micro-batches (growing_batches.py)."""
    _check_split("global batch", global_batch_size, process_count)
    ds, parse, facts = _records(data, data.train_files, "train", vocab_size, type_vocab_size)
    if len(ds) < global_batch_size:
        raise cli.UserError(
            f"{len(ds)} training records are fewer than one global batch of {global_batch_size}"
        )
    ds = ds.shuffle(seed=seed)
    if facts.dynamic_masking:
        draw, apply = masking_rule(facts, data, vocab_size)
        # Seeded by the position in the global stream, before the per-process slice.
        ds = ds.random_map(draw, seed=seed + 1)
    ds = ds.repeat(None)[process_index::process_count]
    rows = global_batch_size // process_count
    if batch_warmup is not None:  # micro-batches, grouped per step at the end of the stream
        if rows % batch_warmup.final:
            raise cli.UserError(
                f"global batch {global_batch_size} over {process_count} processes is not "
                f"divisible into train.grad_accum_steps={batch_warmup.final} micro-batches"
            )
        rows //= batch_warmup.final
    read = grain.ReadOptions(
        num_threads=data.read_threads, prefetch_buffer_size=data.prefetch_buffer_size
    )
    masks, workers = apply if facts.dynamic_masking else None, None
    if data.num_workers > 0:
        _absl_flags_ready()
        workers = grain.MultiprocessingOptions(num_workers=data.num_workers)
    if data.pack:  # rows of several records each: bert_jax/data/input/packed_records.py
        it_ds = packed_records.packed_batches(
            ds, rows, data.pack_window, data.pack_max_examples, seed + 2, read, masks, workers
        )
    else:
        ds = ds.batch(rows, drop_remainder=True)
        it_ds = (ds.map(masks) if masks else ds).to_iter_dataset(read)
        it_ds = it_ds.mp_prefetch(workers) if workers else it_ds
    if parse.skip_damaged:  # in this process, after the workers: one count, saved with the rest
        it_ds = bad_records.CountBadRecords(it_ds, parse.name, data.max_bad_records)
    if batch_warmup is not None:
        it_ds = growing_batches.GrowingBatches(it_ds, batch_warmup.count)
    return it_ds


def eval_batches(
    data,
    files: str | Sequence[str],
    vocab_size: int,
    global_batch_size: int,
    num_examples: int = 0,
    seed: int = 0,
    process_index: int = 0,
    process_count: int = 1,
    type_vocab_size: int = 0,
) -> list[dict[str, np.ndarray]]:
    """This process's rows of every eval batch, in memory: the first `num_examples` records (0:
    all), padded with EXAMPLE_WEIGHT 0 rows. Unmasked records get one fixed masking at
    `data.eval_masked_lm_prob` (None: the training rate), so recipes' accuracies compare."""
    _check_split("eval batch", global_batch_size, process_count)
    ds, parse, facts = _records(data, files, "eval", vocab_size, type_vocab_size)
    if facts.dynamic_masking:
        rate = data.eval_masked_lm_prob  # None: the training's
        if rate is not None:
            facts = dataclasses.replace(facts, masked_lm_prob=float(rate))
        draw, apply = masking_rule(facts, data, vocab_size)
        ds = ds.random_map(draw, seed=seed).map(apply)
    total = len(ds) if num_examples <= 0 else min(num_examples, len(ds))
    if total == 0:
        raise cli.UserError(f"eval files {files!r} hold no records")
    local = global_batch_size // process_count
    num_batches = -(-total // global_batch_size)
    batches, skipped = [], []
    for b in range(num_batches):
        # Process p owns rows [p*local, (p+1)*local) of each global batch.
        start = b * global_batch_size + process_index * local
        rows = [ds[i] for i in range(start, min(start + local, total))]
        weights = (np.arange(local) < len(rows)).astype(np.float32)
        # Padding repeats a real record, weights zeroed: no all-padding attention row.
        pad = {
            **ds[0],
            features.MASKED_LM_WEIGHTS: np.zeros(facts.max_predictions_per_seq, np.float32),
        }
        rows += [pad] * (local - len(rows))
        batch = {k: np.stack([r[k] for r in rows]) for k in pad}
        if parse.skip_damaged:  # a damaged record's blank stand-in weighs nothing in the eval
            marks = batch.pop(bad_records.BAD_RECORD) * (weights > 0)  # padding rows are no records
            weights[marks > 0] = 0.0
            skipped += [parse.name(int(m) - 1) for m in marks[marks > 0]]
        batch[EXAMPLE_WEIGHT] = weights
        batches.append(batch)
    if skipped:
        bad_records.check_eval(skipped, data.max_bad_records)
    return batches
