"""Grain input pipeline: both record formats, global shuffle, per-process parts, resumption
(dynamic masking: test_masking.py)."""

import os
import shutil

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io, shard_files
from bert_jax.data.input import pipeline as ip
from bert_jax.data.input import sources
from support.golden import SAMPLE_128 as GOLDEN
from support.golden import VOCAB_SIZE as VOCAB
from support.golden import data_config, take


@pytest.fixture(scope="module")
def files(testdata, tmp_path_factory, unmask_records):
    tmp = tmp_path_factory.mktemp("records")
    golden = str(testdata / GOLDEN)
    records = list(record_io.read_records(golden))
    out = {
        "tfrecord": golden,
        "arrayrecord": str(tmp / "golden.arrayrecord"),
        "unmasked": str(tmp / "unmasked.arrayrecord"),
    }
    with record_io.RecordWriter(out["arrayrecord"]) as w:
        for r in records:
            w.write(r)
    unmask_records(golden, out["unmasked"])
    return out


def test_both_formats_give_the_same_batches(files):
    a = take(ip.train_dataset(data_config(files["tfrecord"]), VOCAB, 8, seed=3), 4)
    b = take(ip.train_dataset(data_config(files["arrayrecord"]), VOCAB, 8, seed=3), 4)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    assert a[0][F.INPUT_IDS].shape == (8, 128) and a[0][F.INPUT_IDS].dtype == np.int32
    assert a[0][F.MASKED_LM_WEIGHTS].shape == (8, 20) and a[0][F.NEXT_SENTENCE_LABELS].shape == (8,)


def _keys(batches):
    # Records are told apart by their token ids (the 60 golden records are distinct).
    return [row.tobytes() for b in batches for row in b[F.INPUT_IDS]]


def test_global_shuffle_reads_each_record_once_per_epoch(files):
    all_keys = {
        ex[F.INPUT_IDS].astype(np.int32).tobytes()
        for ex in map(F.decode_example, record_io.read_records(files["tfrecord"]))
    }
    assert len(all_keys) == 60
    epochs = _keys(take(ip.train_dataset(data_config(files["tfrecord"]), VOCAB, 10, seed=0), 12))
    first, second = epochs[:60], epochs[60:]
    assert set(first) == all_keys and len(set(first)) == 60
    assert set(second) == all_keys
    assert first != second  # reshuffled every epoch
    in_file_order = [
        ex[F.INPUT_IDS].astype(np.int32).tobytes()
        for ex in map(F.decode_example, record_io.read_records(files["tfrecord"]))
    ]
    assert first != in_file_order


def test_each_process_reads_its_own_part(files):
    cfg = data_config(files["arrayrecord"])
    parts = [
        _keys(take(ip.train_dataset(cfg, VOCAB, 10, seed=0, process_index=p, process_count=2), 6))
        for p in (0, 1)
    ]
    assert all(len(p) == 30 for p in parts)  # 6 batches of 10/2 rows = one epoch each
    assert not set(parts[0]) & set(parts[1])  # disjoint...
    assert len(set(parts[0]) | set(parts[1])) == 60  # ...and together every record once
    single = _keys(take(ip.train_dataset(cfg, VOCAB, 10, seed=0), 6))
    # Process p takes positions p, p+2, ... of the one global order.
    assert single[0::2] == parts[0] and single[1::2] == parts[1]


def test_iterator_state_resumes_exactly(files):
    ds = ip.train_dataset(data_config(files["unmasked"], dynamic=True), VOCAB, 8, seed=1)
    it = iter(ds)
    take(it, 3)
    state = it.get_state()
    expected = take(it, 4)
    fresh = iter(ds)
    fresh.set_state(state)
    for x, y in zip(expected, take(fresh, 4)):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def _open_files() -> list[str]:
    fds = "/proc/self/fd"
    return [os.path.realpath(os.path.join(fds, fd)) for fd in os.listdir(fds)]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_tfrecord_shards_are_closed_when_their_dataset_goes(files, tmp_path):
    """The TFRecord source never closed its files: an eval set, read into memory, kept every
    shard open for the rest of the run, and each dataset built again opened them again."""
    path = str(tmp_path / "eval.tfrecord")
    shutil.copy(files["tfrecord"], path)
    batches = ip.eval_batches(data_config(path), path, VOCAB, 16, num_examples=50)
    assert len(batches) == 4 and path not in _open_files()
    source = sources.TFRecordSource([path, path])
    assert source[0] == source[len(source) // 2]  # the first record of each file
    assert _open_files().count(path) == 2
    del source
    assert path not in _open_files()


def test_eval_batches_pad_the_last_batch(files):
    cfg = data_config(files["tfrecord"])
    batches = ip.eval_batches(cfg, files["tfrecord"], VOCAB, 16, num_examples=50)
    assert len(batches) == 4
    weights = np.concatenate([b[ip.EXAMPLE_WEIGHT] for b in batches])
    assert weights.sum() == 50 and (weights[50:] == 0).all()
    assert (batches[-1][F.MASKED_LM_WEIGHTS][2:] == 0).all()  # padding rows predict nothing
    # Two processes split every global batch between them.
    halves = [
        ip.eval_batches(cfg, files["tfrecord"], VOCAB, 16, 50, process_index=p, process_count=2)
        for p in (0, 1)
    ]
    np.testing.assert_array_equal(
        np.concatenate([halves[0][1][F.INPUT_IDS], halves[1][1][F.INPUT_IDS]]),
        batches[1][F.INPUT_IDS],
    )


def test_clear_errors(files, tmp_path):
    with pytest.raises(cli.UserError, match="no record files match"):
        shard_files.find_shards(str(tmp_path / "missing-*.arrayrecord"))
    with pytest.raises(ValueError, match="dynamic_masking=True"):
        take(ip.train_dataset(data_config(files["unmasked"]), VOCAB, 8, seed=0), 1)
    with pytest.raises(ValueError, match="dynamic_masking=False"):
        take(ip.train_dataset(data_config(files["tfrecord"], dynamic=True), VOCAB, 8, seed=0), 1)
    with pytest.raises(ValueError, match="max_seq_length"):
        take(
            ip.train_dataset(data_config(files["tfrecord"], max_seq_length=512), VOCAB, 8, seed=0),
            1,
        )
    with pytest.raises(ValueError, match="mixed record formats"):
        sources.make_source([files["tfrecord"], files["arrayrecord"]])
    not_tfrecord = tmp_path / "text.tfrecord"
    not_tfrecord.write_text("hello, this is not a TFRecord file at all\n" * 3)
    with pytest.raises(ValueError, match="is it a TFRecord file"):
        sources.make_source([str(not_tfrecord)])
    # A batch that does not split among the processes: refused, not a smaller batch.
    with pytest.raises(cli.UserError, match="global batch 8 is not divisible by 3 processes"):
        ip.train_dataset(data_config(files["tfrecord"]), VOCAB, 8, seed=0, process_count=3)
    with pytest.raises(cli.UserError, match="eval batch 8 is not divisible by 3 processes"):
        ip.eval_batches(
            data_config(files["tfrecord"]), files["tfrecord"], VOCAB, 8, process_count=3
        )


@pytest.mark.parametrize("fmt", record_io.FORMATS)
def test_more_shards_than_the_soft_open_file_limit(files, tmp_path, fmt, monkeypatch):
    # Every shard stays open once read (the shuffle reads them all): 1,500 one-record shards
    # under the common soft limit of 1,024 ended the run with "Too many open files" (ArrayRecord:
    # "record 0 is damaged"); the limit is raised up to the hard one, past which the error says
    # what to do.
    import resource

    record = next(record_io.read_records(files["tfrecord"]))
    paths = []
    for i in range(1500):
        paths.append(str(tmp_path / f"part-{i:05d}.{fmt}"))
        with record_io.RecordWriter(paths[-1]) as w:
            w.write(record)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 3000:
        pytest.skip(f"hard limit on open files {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        source, counts = sources.make_source(paths)
        assert counts == [1] * 1500 and all(source[i] == record for i in range(1500))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 3000), hard))
    monkeypatch.setattr(sources.resource, "getrlimit", lambda _: (256, 1000))
    monkeypatch.setattr(sources, "_shards_kept", 0)
    with pytest.raises(cli.UserError, match="1500 record files are more than this process may"):
        sources.make_source(paths)


def _spoil(kind: str, ex: dict) -> dict:
    n = int(ex[F.INPUT_MASK].sum())
    if kind == "no tokens":
        ex[F.INPUT_MASK][:] = 0
    elif kind == "a hole in input_mask":
        ex[F.INPUT_MASK][n // 2] = 0
    elif kind == "input_mask 2":
        ex[F.INPUT_MASK][1] = 2
    elif kind in ("a position past the record", "a position past the row", "a negative position"):
        at = {"a position past the record": n, "a position past the row": 500}.get(kind, -1)
        ex[F.MASKED_LM_POSITIONS][0], ex[F.MASKED_LM_WEIGHTS][0] = at, 1.0
    elif kind in ("segment id 2", "segment id -1"):
        ex[F.SEGMENT_IDS][n - 1] = int(kind.split()[-1])
    elif kind != "float input_ids":  # (written as floats by _encode)
        ex[F.NEXT_SENTENCE_LABELS][0] = {"NSP label 2": 2, "NSP label -1": -1}[kind]
    return ex


def _encode(kind: str, ex: dict) -> bytes:
    if kind != "float input_ids":
        return F.encode_example(ex)
    from tensorflow_datasets.proto import tf_example_pb2

    example = tf_example_pb2.Example.FromString(F.encode_example(ex))
    ids = example.features.feature[F.INPUT_IDS]
    ids.float_list.value.extend(v + 0.7 for v in ids.int64_list.value)  # replaces the int64s
    return example.SerializeToString()


@pytest.mark.parametrize(
    "kind",
    [
        "no tokens",
        "a hole in input_mask",
        "input_mask 2",
        "a position past the record",
        "a position past the row",
        "a negative position",
        "NSP label 2",
        "NSP label -1",
        "segment id 2",
        "segment id -1",
        "float input_ids",
    ],
)
def test_records_the_model_would_misread_are_errors_naming_them(files, tmp_path, kind):
    # Such a record was trained on in silence (a gather clamps a position; packing put its
    # prediction among another record's tokens), or, packed, crashed with a traceback.
    records = list(record_io.read_records(files["tfrecord"]))[:10]
    victim = np.random.default_rng(len(kind)).integers(10)
    path = str(tmp_path / "spoiled.tfrecord")
    with record_io.RecordWriter(path) as w:
        for i, r in enumerate(records):
            w.write(_encode(kind, _spoil(kind, F.decode_example(r))) if i == victim else r)
    for pack in (False, True):
        cfg = data_config(path, pack=pack, pack_window=10)
        with pytest.raises(cli.UserError, match=rf"spoiled.tfrecord \(record {victim}\): "):
            take(ip.train_dataset(cfg, VOCAB, 10, seed=0, type_vocab_size=2), 1)


def test_worker_processes_outside_absl_app_give_the_batches_of_none(files):
    # The Python API (pretrain.train_and_evaluate from a script or a notebook) with
    # config.data.num_workers > 0 died in Grain with UnparsedFlagAccessError (google/grain#1355).
    # Packed, each of 2 workers batched the rows of its own windows: other batches than none.
    from absl import flags

    if flags.FLAGS.is_parsed():
        flags.FLAGS.unparse_flags()
    cfg = data_config(files["arrayrecord"], pack=True, pack_window=10)
    want = take(ip.train_dataset(cfg, VOCAB, 4, seed=0), 3)
    cfg.num_workers = 2
    got = take(ip.train_dataset(cfg, VOCAB, 4, seed=0), 3)
    for a, b in zip(want, got):
        assert all(np.array_equal(a[k], b[k]) for k in a)
