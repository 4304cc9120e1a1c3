"""The pre-training record schema (google-research/bert's, so records interchange with its
run_pretraining.py and MLPerf's data), shared by data_prep and the input pipeline. No JAX import.
"""

import dataclasses

from bert_jax import cli

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
NEXT_SENTENCE_LABELS = "next_sentence_labels"

# Features of an unmasked record (dynamic masking): the trainer masks on the fly.
UNMASKED_FEATURES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS, NEXT_SENTENCE_LABELS)
MASKED_FEATURES = (MASKED_LM_POSITIONS, MASKED_LM_IDS, MASKED_LM_WEIGHTS)
ALL_FEATURES = UNMASKED_FEATURES + MASKED_FEATURES
FLOAT_FEATURES = frozenset({MASKED_LM_WEIGHTS})


def min_seq_length(segments: int) -> int:
    """The shortest max_seq_length with room for text: [CLS], then per segment a token and [SEP]."""
    return 1 + 2 * segments


def check_seq_length(max_seq_length: int, segments: int, name: str = "max_seq_length") -> None:
    """The one minimum-length rule of pre-training records, fine-tuning inputs and embed."""
    need = min_seq_length(segments)
    if max_seq_length < need:
        raise cli.UserError(
            f"{name}={max_seq_length} leaves no room for text: at least {need} needed ([CLS], "
            f"and a token and a [SEP] for each of {segments} segment{'s' * (segments > 1)})"
        )


@dataclasses.dataclass(frozen=True)
class Schema:
    """Names and fixed lengths of one kind of record. All features are int64 but the weights."""

    max_seq_length: int
    max_predictions_per_seq: int  # 0 for unmasked records

    @property
    def masked(self) -> bool:
        return self.max_predictions_per_seq > 0

    def lengths(self) -> dict[str, int]:
        """Feature name -> fixed length, in the order the original generator lists them."""
        out = dict.fromkeys((INPUT_IDS, INPUT_MASK, SEGMENT_IDS), self.max_seq_length)
        if self.masked:
            out.update(dict.fromkeys(MASKED_FEATURES, self.max_predictions_per_seq))
        out[NEXT_SENTENCE_LABELS] = 1
        return out


def _example_pb2():
    # Imported lazily: the tf.train.Example proto ships with tensorflow-datasets, no TensorFlow.
    from tensorflow_datasets.proto import tf_example_pb2

    return tf_example_pb2


def encode_example(features: dict) -> bytes:
    """{name: numbers} -> a serialized tf.train.Example, sorted by name: protobuf's default order
    differs between processes, and the same job must write the same bytes."""
    example = _example_pb2().Example()
    for name, values in features.items():
        feature = example.features.feature[name]
        if name in FLOAT_FEATURES:
            feature.float_list.value.extend(float(v) for v in values)
        else:
            feature.int64_list.value.extend(int(v) for v in values)
    return example.SerializeToString(deterministic=True)


def decode_example(data: bytes) -> dict:
    """A serialized tf.train.Example -> {name: int64 or float32 array} of ALL_FEATURES (others
    are ignored, as tf.io.parse_single_example does); protobuf's DecodeError for non-Examples."""
    import numpy as np

    table = _example_pb2().Example.FromString(data).features.feature
    dtypes = {"float_list": np.float32, "int64_list": np.int64}
    out = {}
    for name in (name for name in ALL_FEATURES if name in table):
        kind = table[name].WhichOneof("kind")
        if kind not in dtypes:
            raise cli.UserError(f"feature {name!r} holds {kind}; BERT records hold only numbers")
        out[name] = np.asarray(getattr(table[name], kind).value, dtype=dtypes[kind])
    return out


def missing_feature(features: dict, masked: bool) -> str | None:
    """The first needed feature (masked ones too when `masked`) that `features` lacks, or None."""
    needed = UNMASKED_FEATURES + (MASKED_FEATURES if masked else ())
    return next((name for name in needed if name not in features), None)


def unequal_lengths(features: dict) -> str | None:
    """What is wrong when per-token or per-prediction features differ in length, or None."""
    for group in ((INPUT_IDS, INPUT_MASK, SEGMENT_IDS), MASKED_FEATURES):
        lengths = {name: len(features[name]) for name in group if name in features}
        if len(set(lengths.values())) > 1:
            return "features of different lengths: " + ", ".join(
                f"{name} {n}" for name, n in lengths.items()
            )
    return None


def check_example(features: dict, schema: Schema) -> None:
    """Raises a UserError naming the first feature that does not fit `schema`."""
    for name, length in schema.lengths().items():
        if name not in features:
            raise cli.UserError(f"record lacks feature {name!r}; has {sorted(features)}")
        if len(features[name]) != length:
            raise cli.UserError(
                f"feature {name!r} has length {len(features[name])}, schema says {length} "
                f"(max_seq_length={schema.max_seq_length}, "
                f"max_predictions_per_seq={schema.max_predictions_per_seq})"
            )
