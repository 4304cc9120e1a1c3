"""MLM-only records up to 8,192 tokens with a tokenizer.json, documents packed into rows with their
boundaries kept, masked at a rate the config sets (30%) while the eval set stays at 15%: data_prep
(scaled job) -> the trainer's input pipeline (dynamic masking, packing)."""

import numpy as np
import pytest
import tokenizers

from bert_jax.data.contract import data_facts
from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.data.input import pipeline as ip
from bert_jax.text import tokenization
from configs import tiny
from data_prep import instances, job, scaled
from support import tokenizer_files

L = 8192
P = 2600  # > 0.3 x 8192 = 2458: room for the rounding of each packed record's own count


@pytest.fixture(scope="module")
def data(testdata, tmp_path_factory):
    """pydocs_small (65 documents, ~1,800 byte-level BPE tokens each; a few longer than L)."""
    d = tmp_path_factory.mktemp("long")
    vocab = tokenizer_files.make("bpe", d / "tokenizer.json")
    tok = tokenization.make_tokenizer(vocab)
    opts = instances.InstanceOptions(
        max_seq_length=L,
        max_predictions_per_seq=P,
        masked_lm_prob=0.3,
        short_seq_prob=0.0,  # records as long as their document allows: the packer fills rows
        whole_word_mask=True,
        nsp=False,
        mask=False,  # dynamic masking
    )
    corpus = str(testdata / "pydocs_small.txt")
    spec = job.JobSpec((corpus,), opts, dupe_factor=1, eval_fraction=0.2)
    out = str(d / "records")
    manifest = scaled.run(spec, tok, out, progress=False)
    return out, vocab, manifest


def config_for(out, **data):
    config = tiny.get_config()
    config.model.vocab_size = 0  # the tokenizer's 2,000 ids (from the manifest)
    d = config.data
    d.train_files = d.eval_files = out
    d.read_threads = 1
    d.max_predictions_per_seq = P
    d.masked_lm_prob = 0.3
    d.pack, d.pack_max_examples, d.pack_window = True, 32, 16
    d.update(data)
    return data_facts.resolve(config)


def documents(testdata, vocab) -> list[np.ndarray]:
    library = tokenizers.Tokenizer.from_file(vocab)
    text = (testdata / "pydocs_small.txt").read_text(encoding="utf-8")
    docs = [" ".join(p.split("\n")) for p in text.split("\n\n") if p.strip()]
    return [np.asarray(library.encode(d, add_special_tokens=False).ids, np.int32) for d in docs]


def test_each_record_is_a_piece_of_one_document_up_to_8192_tokens(data, testdata):
    out, vocab, manifest = data
    assert manifest["schema"] == {"max_seq_length": L, "max_predictions_per_seq": 0}
    docs = b"|".join(d.tobytes() for d in documents(testdata, vocab))
    config = config_for(out, pack=False, dynamic_masking=True)
    ds, _, _ = ip._records(config.data, out, "train", 2000)
    lengths = []
    for i in range(len(ds)):
        r = ds[i]
        n = int(r[F.INPUT_MASK].sum())
        assert r[F.INPUT_IDS][1 : n - 1].astype(np.int32).tobytes() in docs
        lengths.append(n)
    assert max(lengths) == L  # the longest documents fill whole records, and go on in the next
    assert np.mean(lengths) < L / 3  # most are shorter: unpacked, most of a row would be padding


def test_packed_rows_keep_each_document_and_mask_30_percent(data):
    out, vocab, _ = data
    config = config_for(out, dynamic_masking=True)
    assert config.data.whole_word_mask  # as data_prep was asked
    it = iter(ip.train_dataset(config.data, 2000, 2, seed=3))
    tok = tokenization.make_tokenizer(vocab)
    per_row, masked, real = [], 0, 0
    for _ in range(6):
        batch = next(it)
        assert batch[F.INPUT_IDS].shape == (2, L)
        for r in range(2):
            slots = np.flatnonzero(batch[packing.EXAMPLE_WEIGHTS][r])
            per_row.append(len(slots))
            for s in slots:  # each record whole, its own positions, [CLS] first and [SEP] last
                where = np.flatnonzero(batch[packing.EXAMPLE_IDS][r] == s + 1)
                assert (np.diff(where) == 1).all() and where[0] == batch[packing.CLS_POSITIONS][
                    r, s
                ]
                np.testing.assert_array_equal(
                    batch[packing.POSITION_IDS][r, where], np.arange(len(where))
                )
                assert batch[F.INPUT_IDS][r, where[-1]] == tok.sep_id
            weights = batch[F.MASKED_LM_WEIGHTS][r] > 0
            positions = batch[F.MASKED_LM_POSITIONS][r][weights]
            assert (batch[packing.EXAMPLE_IDS][r, positions] > 0).all()
            masked, real = masked + int(weights.sum()), real + int(batch[F.INPUT_MASK][r].sum())
    assert np.mean(per_row) > 2  # documents packed several a row
    assert masked / real == pytest.approx(0.3, abs=0.02)


@pytest.mark.parametrize("rate, expected", [(0.15, 0.15), (None, 0.3)])
def test_the_eval_set_is_masked_at_its_own_rate(data, rate, expected):
    out, _, _ = data
    config = config_for(out, pack=False, dynamic_masking=True, eval_masked_lm_prob=rate)
    batches = ip.eval_batches(config.data, out, 2000, 4)
    masked = sum(b[F.MASKED_LM_WEIGHTS][b[ip.EXAMPLE_WEIGHT] > 0].sum() for b in batches)
    real = sum(b[F.INPUT_MASK][b[ip.EXAMPLE_WEIGHT] > 0].sum() for b in batches)
    assert masked / real == pytest.approx(expected, abs=0.01)
