"""The pre-training record schema, shared by data_prep (writer) and the input pipeline (reader).

It is google-research/bert's schema, so records interchange with its run_pretraining.py and with
MLPerf's BERT data. No JAX import here: data_prep depends on this module.
"""
import dataclasses

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
FLOAT_FEATURES = frozenset({MASKED_LM_WEIGHTS})


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
        out = {
            INPUT_IDS: self.max_seq_length,
            INPUT_MASK: self.max_seq_length,
            SEGMENT_IDS: self.max_seq_length,
        }
        if self.masked:
            out[MASKED_LM_POSITIONS] = self.max_predictions_per_seq
            out[MASKED_LM_IDS] = self.max_predictions_per_seq
            out[MASKED_LM_WEIGHTS] = self.max_predictions_per_seq
        out[NEXT_SENTENCE_LABELS] = 1
        return out

    def dtype(self, name: str) -> str:
        return "float32" if name in FLOAT_FEATURES else "int64"
