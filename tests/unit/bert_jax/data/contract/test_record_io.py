"""Our TFRecords parse with tf.data exactly as google-research/bert's run_pretraining.py reads them.

TensorFlow is not a dependency (the project reads and writes records without it), so this runs only
where TensorFlow is installed: `pip install tensorflow-cpu` in a separate venv and run this file.
Checked with TensorFlow 2.21.
"""

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from bert_jax.text import tokenization
from data_prep import instances, reference

tf = pytest.importorskip("tensorflow")


def test_tf_data_parses_our_records_with_the_original_schema(tmp_path, testdata, vocab_file):
    tok = tokenization.WordPieceTokenizer(vocab_file)
    manifest = reference.run(
        [str(testdata / "sample_text.txt")],
        tok,
        instances.InstanceOptions(),
        dupe_factor=2,
        seed=3,
        output_dir=str(tmp_path),
        fmt="tfrecord",
        flags={},
    )
    path = str(tmp_path / manifest["shards"]["train"][0]["file"])
    L, P = 128, 20
    name_to_features = {  # run_pretraining.py's input_fn
        "input_ids": tf.io.FixedLenFeature([L], tf.int64),
        "input_mask": tf.io.FixedLenFeature([L], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([L], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([P], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([P], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([P], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    dataset = tf.data.TFRecordDataset(path).map(
        lambda r: tf.io.parse_single_example(r, name_to_features)
    )
    ours = [F.decode_example(r) for r in record_io.read_records(path)]
    parsed = list(dataset.as_numpy_iterator())
    assert len(parsed) == len(ours) > 0
    for a, b in zip(parsed, ours):
        for name in name_to_features:
            np.testing.assert_array_equal(a[name], b[name])
