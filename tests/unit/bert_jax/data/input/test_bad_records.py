"""Issue 23: every record read is checked by what its format carries, a damaged one is an error
naming the shard and record (or, with data.bad_records='skip', counted and bounded), and a valid
Example with extra features is read as the clean one. The binaries' side is the bad-input sweep
(tests/support/sweep_integrity.py)."""

import pickle
import shutil

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from bert_jax.data.input import bad_records, sources
from bert_jax.data.input import pipeline as ip
from support.golden import SAMPLE_128 as GOLDEN
from support.golden import VOCAB_SIZE as VOCAB
from support.golden import data_config, take


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


@pytest.fixture
def golden(testdata, tmp_path):
    path = tmp_path / "golden.tfrecord"
    shutil.copy(testdata / GOLDEN, path)
    return str(path)


def _damage_record(path, k):
    """Flips one bit in the data of record k (the masked-LM labels are near its end)."""
    offsets, lengths = record_io.tfrecord_index(path)
    _flip(path, int(offsets[k] + lengths[k] - 20))


def test_a_flipped_bit_in_a_tfrecord_is_an_error_naming_shard_and_record(golden):
    clean = list(record_io.read_records(golden))
    _damage_record(golden, 7)
    source = sources.TFRecordSource([golden])
    assert [source[i] for i in range(7)] == clean[:7]  # the others read as before
    with pytest.raises(
        record_io.DamagedRecord,
        match=r"golden.tfrecord: record 7 is damaged "
        r"\(the data's CRC-32C differs",
    ):
        source[7]
    with pytest.raises(record_io.DamagedRecord, match="record 7"):
        list(record_io.read_records(golden))
    # read_records(verify=False) is what went unnoticed: a decodable record with another label
    changed = list(record_io.read_records(golden, verify=False))[7]
    assert changed != clean[7]
    F.decode_example(changed)


def test_a_damaged_length_is_found_when_the_shard_is_indexed(golden):
    offsets, _ = record_io.tfrecord_index(golden)
    _flip(golden, int(offsets[5]) - 12)  # record 5's length field
    with pytest.raises(record_io.DamagedRecord, match=r"record 5 is damaged .*length's CRC"):
        sources.TFRecordSource([golden])
    with pytest.raises(record_io.DamagedRecord, match="record 5"):
        record_io.count_records(golden)


def test_the_error_pickles_with_its_fields(golden):
    """Grain worker processes (config.data.num_workers) send errors back pickled; the sweep's
    `train: damaged record in a Grain worker process` runs one."""
    error = record_io.damaged(golden, 3, "x")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.path, again.index) == (
        record_io.DamagedRecord,
        str(error),
        golden,
        3,
    )


def test_a_damaged_arrayrecord_chunk_names_the_shard_and_record(golden, tmp_path):
    path = str(tmp_path / "golden.arrayrecord")
    with record_io.RecordWriter(path) as w:
        for r in record_io.read_records(golden):
            w.write(r)
    _flip(path, 2000)  # inside a chunk: Riegeli's chunk hash differs
    source, counts = sources.make_source([path])
    errors = []
    for i in range(counts[0]):
        try:
            source[i]
        except record_io.DamagedRecord as e:
            errors.append(e)
    assert len(errors) == 1 and errors[0].path == path
    assert f"record {errors[0].index} is damaged (ArrayRecord: " in str(errors[0])
    assert "Corrupted Riegeli/records file" in str(errors[0])
    with pytest.raises(record_io.DamagedRecord, match=f"record {errors[0].index} is damaged"):
        list(record_io.read_records(path))


def test_skip_replaces_counts_and_bounds_damaged_records(golden):
    for k in (2, 30, 41):
        _damage_record(golden, k)
    data = data_config(golden, bad_records="skip", max_bad_records=3)
    it = iter(ip.train_dataset(data, VOCAB, 20, seed=0))
    batches = take(it, 3)  # one epoch of 60 records
    assert bad_records.count(it) == 3 and bad_records.BAD_RECORD not in batches[0]
    blank = [(b, r) for b in batches for r in range(20) if b[F.INPUT_MASK][r].sum() == 2]
    assert len(blank) == 3
    for b, r in blank:  # adds nothing to either loss
        assert b[F.MASKED_LM_WEIGHTS][r].sum() == 0 and b[ip.NEXT_SENTENCE_WEIGHTS][r] == 0
    state = it.get_state()
    assert state[bad_records.STATE_KEY] == 3
    with pytest.raises(bad_records.TooManyBadRecords, match="max_bad_records=3"):
        take(it, 3)  # the second epoch meets them again: 4 > 3
    resumed = iter(ip.train_dataset(data, VOCAB, 20, seed=0))
    resumed.set_state(state)
    assert bad_records.count(resumed) == 3  # the count is saved with the position


def test_skip_leaves_the_other_records_as_they_were(golden, testdata):
    _damage_record(golden, 9)
    clean = take(ip.train_dataset(data_config(testdata / GOLDEN), VOCAB, 20, seed=4), 3)
    skipped = take(ip.train_dataset(data_config(golden, bad_records="skip"), VOCAB, 20, seed=4), 3)
    differ = 0
    for a, b in zip(clean, skipped):
        rows = (a[F.INPUT_IDS] != b[F.INPUT_IDS]).any(axis=1)
        differ += int(rows.sum())
        for key in a:
            np.testing.assert_array_equal(a[key][~rows], b[key][~rows], err_msg=key)
    assert differ == 1


def test_eval_weighs_a_skipped_record_zero(golden):
    _damage_record(golden, 0)
    data = data_config(golden, bad_records="skip")
    batches = ip.eval_batches(data, golden, VOCAB, 16)
    assert batches[0][ip.EXAMPLE_WEIGHT][0] == 0 and batches[0][ip.EXAMPLE_WEIGHT][1:].all()
    with pytest.raises(bad_records.TooManyBadRecords, match="eval set holds 1 damaged"):
        ip.eval_batches(
            data_config(golden, bad_records="skip", max_bad_records=0), golden, VOCAB, 16
        )


def _rewrite(src, dst, change):
    from tensorflow_datasets.proto import tf_example_pb2

    with record_io.RecordWriter(dst) as w:
        for raw in record_io.read_records(src):
            example = tf_example_pb2.Example.FromString(raw)
            change(example)
            w.write(example.SerializeToString())


def test_extra_features_are_ignored_missing_ones_named(testdata, tmp_path):
    golden = str(testdata / GOLDEN)

    def extra(e):
        e.features.feature["text"].bytes_list.value.append(b"a sentence")
        e.features.feature["doc_id"].int64_list.value.append(3)

    _rewrite(golden, tmp_path / "extra.tfrecord", extra)
    want = take(ip.train_dataset(data_config(golden), VOCAB, 20, seed=1), 3)
    got = take(ip.train_dataset(data_config(tmp_path / "extra.tfrecord"), VOCAB, 20, seed=1), 3)
    for a, b in zip(want, got):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    _rewrite(golden, tmp_path / "bare.tfrecord", lambda e: e.features.feature.pop(F.INPUT_IDS))
    with pytest.raises(ValueError, match=r"bare.tfrecord \(record \d+\) has no 'input_ids'"):
        take(ip.train_dataset(data_config(tmp_path / "bare.tfrecord"), VOCAB, 20, seed=1), 1)
