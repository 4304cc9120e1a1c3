"""Packed pre-training batches from the Grain pipeline: every record once, intact, in the same
order of windows as unpacked; exact resume; the NSP weight of MLM-only records; batch shapes."""

import collections

import numpy as np
import pytest

from bert_jax.data.contract import data_facts, record_io
from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.data.input import pipeline as ip
from bert_jax.training import pretrain
from configs import tiny

GOLDEN = "sample_text.L128.P20.dupe5.tfrecord"  # 60 records, L=128, P=20
VOCAB, WINDOW, ROWS = 30522, 16, 4


@pytest.fixture(scope="module")
def files(testdata, tmp_path_factory):
    """The golden records, and the same with their masks undone (for dynamic masking)."""
    unmasked = str(tmp_path_factory.mktemp("records") / "unmasked.arrayrecord")
    with record_io.RecordWriter(unmasked) as w:
        for r in record_io.read_records(str(testdata / GOLDEN)):
            ex = F.decode_example(r)
            ids, real = ex[F.INPUT_IDS].copy(), ex[F.MASKED_LM_WEIGHTS] > 0
            ids[ex[F.MASKED_LM_POSITIONS][real]] = ex[F.MASKED_LM_IDS][real]
            w.write(
                F.encode_example({F.INPUT_IDS: ids, **{k: ex[k] for k in F.UNMASKED_FEATURES[1:]}})
            )
    return {"static": str(testdata / GOLDEN), "dynamic": unmasked}


def data_config(path, pack=True, dynamic=False, **kw):
    config = tiny.get_config()
    d = config.data
    d.train_files, d.dynamic_masking, d.read_threads = path, dynamic, 1
    d.pack, d.pack_window = pack, WINDOW
    # The golden records have no manifest: their facts by hand.
    d.max_seq_length, d.max_predictions_per_seq = 128, 20
    d.cls_token_id, d.sep_token_id, d.mask_token_id = 101, 102, 103
    d.update(kw)
    return data_facts.resolve(config)  # the data's facts from its manifest


def batches(config, n, rows=ROWS):
    it = iter(ip.train_dataset(config.data, VOCAB, rows, seed=5))
    return [next(it) for _ in range(n)]


def record_key(ids, segments, positions, labels, nsp):
    return (tuple(ids), tuple(segments), tuple(positions), tuple(labels), int(nsp))


def unpacked_keys(batch):
    out = []
    for i in range(len(batch[F.INPUT_IDS])):
        n = batch[F.INPUT_MASK][i].sum()
        real = batch[F.MASKED_LM_WEIGHTS][i] > 0
        out.append(
            record_key(
                batch[F.INPUT_IDS][i, :n],
                batch[F.SEGMENT_IDS][i, :n],
                batch[F.MASKED_LM_POSITIONS][i][real],
                batch[F.MASKED_LM_IDS][i][real],
                batch[F.NEXT_SENTENCE_LABELS][i],
            )
        )
    return out


def packed_keys(batch):
    """Each record of each packed row, cut back out of it by its example id."""
    out = []
    for r in range(len(batch[F.INPUT_IDS])):
        for s in np.flatnonzero(batch[packing.EXAMPLE_WEIGHTS][r]):
            tokens = np.flatnonzero(batch[packing.EXAMPLE_IDS][r] == s + 1)
            start = batch[packing.CLS_POSITIONS][r, s]
            assert tokens[0] == start and (np.diff(tokens) == 1).all()
            np.testing.assert_array_equal(
                batch[packing.POSITION_IDS][r, tokens], np.arange(len(tokens))
            )
            pos = batch[F.MASKED_LM_POSITIONS][r]
            mine = (batch[F.MASKED_LM_WEIGHTS][r] > 0) & (pos >= start) & (pos <= tokens[-1])
            out.append(
                record_key(
                    batch[F.INPUT_IDS][r, tokens],
                    batch[F.SEGMENT_IDS][r, tokens],
                    pos[mine] - start,
                    batch[F.MASKED_LM_IDS][r][mine],
                    batch[F.NEXT_SENTENCE_LABELS][r, s],
                )
            )
    return out


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_packed_rows_hold_the_unpacked_records_window_by_window(files, masking):
    dynamic = masking == "dynamic"
    unpacked = [
        k
        for b in batches(data_config(files[masking], False, dynamic), 16)
        for k in unpacked_keys(b)
    ]
    packed = [
        k for b in batches(data_config(files[masking], True, dynamic), 14) for k in packed_keys(b)
    ]
    assert len(packed) > 14 * ROWS  # several records per row
    # Window after window (16 records each, across epochs of 60), the rows hold exactly the
    # records the unpacked stream reads, each once and unchanged (masks included).
    for w in range(3):
        done = (w + 1) * WINDOW
        assert collections.Counter(packed[w * WINDOW : done]) == collections.Counter(
            unpacked[w * WINDOW : done]
        ), f"window {w}"


def test_packed_iterator_resumes_exactly(files):
    ds = ip.train_dataset(data_config(files["dynamic"], dynamic=True).data, VOCAB, ROWS, seed=1)
    it = iter(ds)
    for _ in range(5):  # into the second window
        next(it)
    state = it.get_state()
    want = [next(it) for _ in range(6)]
    again = iter(ds)
    again.set_state(state)
    for a, b in zip(want, [next(again) for _ in range(6)]):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_mlm_only_records_carry_no_nsp_weight(files):
    for pack in (True, False):
        (batch,) = batches(data_config(files["static"], pack, nsp=False), 1)
        assert (batch[ip.NEXT_SENTENCE_WEIGHTS] == 0).all()
    (batch,) = batches(data_config(files["static"]), 1)
    np.testing.assert_array_equal(
        batch[ip.NEXT_SENTENCE_WEIGHTS], batch[packing.EXAMPLE_WEIGHTS]
    )  # NSP pairs: one weight per record, none for empty slots


@pytest.mark.parametrize("pack", [True, False])
def test_abstract_batch_is_what_the_pipeline_delivers(files, pack):
    config = data_config(files["static"], pack)
    config.train.global_batch_size = ROWS
    config.mesh.num_devices = 1
    facts = data_facts.DataFacts.from_data(config.data)
    want = pretrain.abstract_batch(facts, ROWS, pretrain.make_setup(config))
    (got,) = batches(config, 1)
    assert {k: (v.shape, v.dtype) for k, v in want.items()} == {
        k: (v.shape, v.dtype) for k, v in got.items()
    }


def test_bad_packing_settings_are_named(files):
    with pytest.raises(ValueError, match="pack_window"):
        batches(data_config(files["static"], pack_window=0), 1)
