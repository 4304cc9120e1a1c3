"""Instances <-> record features, and records -> readable text (the `decode` command's core).

The padding and feature layout are the original generator's (write_instance_to_example_files):
ids, mask and segments padded with 0 to max_seq_length; masked positions, ids and 1.0 weights padded
with 0 to max_predictions_per_seq; next_sentence_labels is 1 when B is a random sentence.
"""

from bert_jax import features as F
from data_prep.instances import Instance


def instance_to_features(instance: Instance, schema: F.Schema) -> dict:
    """The record's features; unmasked schemas (max_predictions_per_seq=0) leave out the masked_*
    ones."""
    n, length = len(instance.tokens), schema.max_seq_length
    if n > length:
        raise ValueError(f"instance has {n} tokens, more than max_seq_length={length}")
    pad = [0] * (length - n)
    out = {
        F.INPUT_IDS: list(instance.tokens) + pad,
        F.INPUT_MASK: [1] * n + pad,
        F.SEGMENT_IDS: list(instance.segment_ids) + pad,
    }
    if schema.masked:
        p = len(instance.masked_lm_positions)
        mpad = [0] * (schema.max_predictions_per_seq - p)
        out[F.MASKED_LM_POSITIONS] = list(instance.masked_lm_positions) + mpad
        out[F.MASKED_LM_IDS] = list(instance.masked_lm_labels) + mpad
        out[F.MASKED_LM_WEIGHTS] = [1.0] * p + [0.0] * len(mpad)
    out[F.NEXT_SENTENCE_LABELS] = [1 if instance.is_random_next else 0]
    return out


def serialize(instance: Instance, schema: F.Schema) -> bytes:
    return F.encode_example(instance_to_features(instance, schema))


def describe(features: dict, tokenizer) -> str:
    """A record as text: tokens with [MASK]ed positions showing the label, segments, NSP label."""
    n = int(sum(features[F.INPUT_MASK]))
    tokens = tokenizer.convert_ids_to_tokens(features[F.INPUT_IDS][:n])
    segments = [int(s) for s in features[F.SEGMENT_IDS][:n]]
    lines = []
    if F.MASKED_LM_POSITIONS in features:
        weights = features[F.MASKED_LM_WEIGHTS]
        masked = [
            (int(p), int(i))
            for p, i, w in zip(features[F.MASKED_LM_POSITIONS], features[F.MASKED_LM_IDS], weights)
            if w > 0
        ]
        labels = dict(
            zip((p for p, _ in masked), tokenizer.convert_ids_to_tokens([i for _, i in masked]))
        )
        shown = [f"{t}<{labels[i]}>" if i in labels else t for i, t in enumerate(tokens)]
        lines.append("tokens:   " + " ".join(shown))
        lines.append("masked:   " + " ".join(f"{p}:{labels[p]}" for p, _ in masked))
    else:
        lines.append("tokens:   " + " ".join(tokens) + "   (unmasked record)")
    lines.append("segments: " + "".join(str(s) for s in segments))
    label = int(features[F.NEXT_SENTENCE_LABELS][0])
    lines.append(
        f"next_sentence_label: {label} ({'random B' if label else 'actual next'}); {n} tokens"
    )
    return "\n".join(lines)
