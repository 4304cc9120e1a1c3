"""Reference mode on odd Unicode: the original generator's records, record for record.

data_prep/testdata/odd_unicode.txt (made by tests/support/make_odd_unicode.py) puts private-use,
unassigned, format and control characters, U+FFFD, combining marks, CJK and other scripts,
fullwidth forms, emoji sequences and mojibake into pydocs sentences; the golden file was written
from it by google-research/bert's create_pretraining_data.py (GOLDEN.md says how). Before the
tokenizer kept private-use and unassigned characters as the original does, this corpus gave
different records.
"""

import numpy as np

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from bert_jax.text import tokenization
from data_prep import instances, reference


def test_reference_mode_matches_original_on_odd_unicode(tmp_path, testdata, vocab_file):
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    manifest = reference.run(
        [str(testdata / "odd_unicode.txt")],
        tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True),
        opts,
        dupe_factor=3,
        seed=12345,
        output_dir=str(tmp_path),
        fmt=record_io.TFRECORD,
        flags={},
    )
    path = tmp_path / manifest["shards"]["train"][0]["file"]
    ours = [F.decode_example(r) for r in record_io.read_records(str(path))]
    golden = testdata / "odd_unicode.L64.P10.dupe3.tfrecord"
    expected = [F.decode_example(r) for r in record_io.read_records(str(golden))]
    assert len(ours) == len(expected)
    for index, (a, b) in enumerate(zip(ours, expected)):
        assert a.keys() == b.keys(), index
        for name in b:
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"record {index}, {name}")
