"""Record shards -> Grain -> host-local numpy batches (train: endless, shuffled; eval: one pass).

Files are data_prep's ArrayRecord shards or TFRecord files written by google-research/bert's
generator (the format follows each file's name, see record_io.format_of). Records are decoded
with features.decode_example, so any file in the original schema works.

Train order: one global permutation of all records per epoch (seeded by epoch), then process p
of n takes positions p, p+n, p+2n, ... of the permuted stream. Together the processes read each
record exactly once per epoch, each a different random part every epoch, and the order is a pure
function of (seed, step): resuming from a saved iterator position replays the same batches.

Dynamic masking (`data.dynamic_masking`) masks unmasked records in the Grain map, in numpy, with
a generator Grain seeds from (seed, position in the stream): a record is masked differently in
every epoch, yet identically when a run is resumed.
"""

import bisect
import glob
import os
import struct
from collections.abc import Sequence

import grain
import numpy as np

from bert_jax import features, packed_records, record_io

INT_FEATURES = (
    features.INPUT_IDS,
    features.INPUT_MASK,
    features.SEGMENT_IDS,
    features.MASKED_LM_POSITIONS,
    features.MASKED_LM_IDS,
)
# Added to eval batches: 1 for a real example, 0 for the padding that fills the last batch.
EXAMPLE_WEIGHT = "example_weight"
# Added to every record: 1.0 where the record is an NSP pair, 0.0 for MLM-only records
# (config.data.nsp=False), whose NSP labels mean nothing: the NSP loss and metrics skip them.
NEXT_SENTENCE_WEIGHTS = "next_sentence_weights"


def expand_files(patterns: str | Sequence[str]) -> list[str]:
    """Comma-separated globs (or a list of them) -> sorted file list; an error if none match."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    files = []
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.expanduser(pattern.strip())))
        if not matches:
            raise FileNotFoundError(f"no record files match {pattern!r}")
        files.extend(matches)
    if not files:
        raise ValueError("no record files given: set config.data.train_files (and eval_files)")
    return files


class TFRecordSource:
    """Random access to the records of TFRecord files, for Grain.

    TFRecord has no index, so the constructor scans each file's 12-byte length headers once
    (seeking past the data, which it never reads) and keeps one offset per record: 8 bytes per
    record in memory, the data stays on disk. Loading whole files instead would cost the
    dataset's size in RAM on every host. Reads use os.pread, safe from Grain's reader threads.
    """

    def __init__(self, paths: Sequence[str]):
        self._paths = list(paths)
        self._offsets = []  # per file: int64 [records] offset of each record's data
        self._lengths = []
        self._starts = [0]  # global index of each file's first record
        for path in self._paths:
            offsets, lengths = self._index(path)
            self._offsets.append(offsets)
            self._lengths.append(lengths)
            self._starts.append(self._starts[-1] + len(offsets))
        self._fds: dict[int, int] = {}

    @staticmethod
    def _index(path: str) -> tuple[np.ndarray, np.ndarray]:
        offsets, lengths = [], []
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            pos = 0
            while pos < size:
                header = f.read(12)
                if len(header) < 12:
                    raise ValueError(
                        f"{path}: truncated TFRecord header at byte {pos}; is it a TFRecord file?"
                    )
                (length,) = struct.unpack("<Q", header[:8])
                if pos + 16 + length > size:
                    raise ValueError(
                        f"{path}: record at byte {pos} claims {length} bytes, past the end "
                        "of the file; is it a TFRecord file?"
                    )
                offsets.append(pos + 12)
                lengths.append(length)
                pos += 16 + length
                f.seek(pos)
        return np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index) -> bytes:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range [0, {len(self)})")
        file_i = bisect.bisect_right(self._starts, index) - 1
        j = index - self._starts[file_i]
        fd = self._fds.get(file_i)
        if fd is None:
            fd = self._fds[file_i] = os.open(self._paths[file_i], os.O_RDONLY)
        return os.pread(fd, int(self._lengths[file_i][j]), int(self._offsets[file_i][j]))

    def __getstate__(self):
        # File descriptors do not survive pickling into Grain worker processes; reopen there.
        state = dict(self.__dict__)
        state["_fds"] = {}
        return state

    def __repr__(self) -> str:
        return f"TFRecordSource({len(self._paths)} files, {len(self)} records)"


def make_source(files: Sequence[str]):
    """A Grain random-access source over files of one format."""
    formats = {record_io.format_of(f) for f in files}
    if len(formats) > 1:
        raise ValueError(
            f"mixed record formats {sorted(formats)} in one file list; convert them to one"
        )
    if formats == {record_io.ARRAYRECORD}:
        return grain.sources.ArrayRecordDataSource(list(files))
    return TFRecordSource(files)


def _import_proto() -> None:
    # decode_example imports tf.train.Example from tensorflow_datasets on first use. Done first by
    # several Grain reader threads at once, tfds' lazy imports deadlock (Python 3.11's
    # cached_property lock against the import lock), so import it here, in one thread.
    features.encode_example({})


class ParseRecord(grain.transforms.Map):
    """Serialized tf.train.Example -> dict of int32/float32 numpy arrays, checked against the
    schema."""

    def __init__(self, schema: features.Schema, nsp: bool = True):
        self.schema = schema
        self.nsp = nsp
        _import_proto()

    def __setstate__(self, state):  # in a Grain worker process
        self.__dict__.update(state)
        _import_proto()

    def map(self, record: bytes) -> dict[str, np.ndarray]:
        example = features.decode_example(record)
        if not self.schema.masked and features.MASKED_LM_POSITIONS in example:
            raise ValueError(
                "dynamic masking needs unmasked records, but these are already masked: "
                "set config.data.dynamic_masking=False"
            )
        try:
            features.check_example(example, self.schema)
        except ValueError as e:
            if self.schema.masked and features.MASKED_LM_POSITIONS not in example:
                raise ValueError(
                    "records are unmasked (no masked_lm_* features): set "
                    "config.data.dynamic_masking=True to mask them while training"
                ) from e
            raise ValueError(
                f"{e}; set config.data.max_seq_length / max_predictions_per_seq "
                "to the values the records were written with"
            ) from e
        out = {name: example[name].astype(np.int32) for name in INT_FEATURES if name in example}
        if self.schema.masked:
            out[features.MASKED_LM_WEIGHTS] = example[features.MASKED_LM_WEIGHTS].astype(np.float32)
        out[features.NEXT_SENTENCE_LABELS] = example[features.NEXT_SENTENCE_LABELS].astype(
            np.int32
        )[0]
        out[NEXT_SENTENCE_WEIGHTS] = np.float32(self.nsp)
        return out


class DynamicMasking(grain.transforms.RandomMap):
    """google-research/bert's masking, applied per record at read time.

    Picks round(15% of the real tokens) positions (at least 1, at most max_predictions), never
    [CLS] or [SEP] and never padding; replaces 80% of them with [MASK], keeps 10% and puts a
    random vocabulary id in the other 10%. Positions come out sorted, as the original writes them.
    """

    def __init__(
        self,
        max_predictions: int,
        masked_lm_prob: float,
        vocab_size: int,
        cls_id: int,
        sep_id: int,
        mask_id: int,
    ):
        self.max_predictions = max_predictions
        self.masked_lm_prob = masked_lm_prob
        self.vocab_size = vocab_size
        self.cls_id, self.sep_id, self.mask_id = cls_id, sep_id, mask_id

    def random_map(self, example: dict, rng: np.random.Generator) -> dict:
        ids = example[features.INPUT_IDS]
        n = int(example[features.INPUT_MASK].sum())
        candidates = np.flatnonzero((ids[:n] != self.cls_id) & (ids[:n] != self.sep_id))
        k = min(self.max_predictions, max(1, round(n * self.masked_lm_prob)), len(candidates))
        chosen = np.sort(rng.permutation(candidates)[:k])
        roll = rng.random(k)
        masked_ids = ids.copy()
        masked_ids[chosen[roll < 0.8]] = self.mask_id
        randomize = chosen[roll >= 0.9]
        masked_ids[randomize] = rng.integers(0, self.vocab_size, len(randomize))

        p = self.max_predictions
        positions = np.zeros(p, np.int32)
        labels = np.zeros(p, np.int32)
        weights = np.zeros(p, np.float32)
        positions[:k], labels[:k], weights[:k] = chosen, ids[chosen], 1.0
        return {
            **example,
            features.INPUT_IDS: masked_ids,
            features.MASKED_LM_POSITIONS: positions,
            features.MASKED_LM_IDS: labels,
            features.MASKED_LM_WEIGHTS: weights,
        }


def _records(
    files, max_seq_length: int, max_predictions: int, dynamic_masking: bool, nsp: bool = True
) -> grain.MapDataset:
    schema = features.Schema(max_seq_length, 0 if dynamic_masking else max_predictions)
    return grain.MapDataset.source(make_source(files)).map(ParseRecord(schema, nsp))


def _masker(data, vocab_size: int) -> DynamicMasking:
    return DynamicMasking(
        data.max_predictions_per_seq,
        data.masked_lm_prob,
        vocab_size,
        data.cls_token_id,
        data.sep_token_id,
        data.mask_token_id,
    )


def train_dataset(
    data,
    vocab_size: int,
    global_batch_size: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
) -> grain.IterDataset:
    """Endless batches of this process's share: dicts of [global_batch / processes, ...] arrays.

    `data` is config.data. Iterate with `iter(...)`; the iterator's get_state()/set_state()
    give the exact position (Orbax saves it through grain.checkpoint). With data.pack a row
    holds one or more records (bert_jax/packed_records.py); each process packs its own part,
    so the global batches depend on the number of processes.
    """
    if global_batch_size % process_count:
        raise ValueError(
            f"global batch {global_batch_size} is not divisible by {process_count} processes"
        )
    files = expand_files(data.train_files)
    ds = _records(
        files, data.max_seq_length, data.max_predictions_per_seq, data.dynamic_masking, data.nsp
    )
    if len(ds) < global_batch_size:
        raise ValueError(
            f"{len(ds)} training records are fewer than one global batch of {global_batch_size}"
        )
    ds = ds.shuffle(seed=seed)
    if data.dynamic_masking:
        # Before the per-process slice: Grain seeds the generator by the position in the global
        # stream, so no two processes (or epochs) share a masking stream.
        ds = ds.random_map(_masker(data, vocab_size), seed=seed + 1)
    ds = ds.repeat(None)[process_index::process_count]
    rows = global_batch_size // process_count
    read = grain.ReadOptions(
        num_threads=data.read_threads, prefetch_buffer_size=data.prefetch_buffer_size
    )
    if data.pack:  # rows of several records each: bert_jax/packed_records.py
        it_ds = packed_records.packed_batches(
            ds, rows, data.pack_window, data.pack_max_examples, seed + 2, read
        )
    else:
        it_ds = ds.batch(rows, drop_remainder=True).to_iter_dataset(read)
    if data.num_workers > 0:
        it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=data.num_workers))
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
) -> list[dict[str, np.ndarray]]:
    """The eval set as this process's rows of every global batch, in memory for reuse.

    The first `num_examples` records (0: all) in file order; the last batch is padded with
    EXAMPLE_WEIGHT 0 rows so every process runs the same number of steps. Unmasked records get a
    fixed masking (seeded by `seed`), so every evaluation sees the same masked positions.
    """
    if global_batch_size % process_count:
        raise ValueError(
            f"eval batch {global_batch_size} is not divisible by {process_count} processes"
        )
    ds = _records(
        expand_files(files),
        data.max_seq_length,
        data.max_predictions_per_seq,
        data.dynamic_masking,
        data.nsp,
    )
    if data.dynamic_masking:
        ds = ds.random_map(_masker(data, vocab_size), seed=seed)
    total = len(ds) if num_examples <= 0 else min(num_examples, len(ds))
    if total == 0:
        raise ValueError(f"eval files {files!r} hold no records")
    local = global_batch_size // process_count
    num_batches = -(-total // global_batch_size)
    batches = []
    for b in range(num_batches):
        # Process p owns rows [p*local, (p+1)*local) of each global batch.
        start = b * global_batch_size + process_index * local
        rows = [ds[i] for i in range(start, min(start + local, total))]
        weights = np.zeros(local, np.float32)
        weights[: len(rows)] = 1.0
        # Padding repeats a real record with its masked-LM weights zeroed, so the model sees
        # well-formed input (no all-padding attention row) and the metrics ignore it.
        pad = {
            **ds[0],
            features.MASKED_LM_WEIGHTS: np.zeros(data.max_predictions_per_seq, np.float32),
        }
        rows += [pad] * (local - len(rows))
        batch = {k: np.stack([r[k] for r in rows]) for k in pad}
        batch[EXAMPLE_WEIGHT] = weights
        batches.append(batch)
    return batches
