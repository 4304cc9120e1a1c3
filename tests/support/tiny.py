"""The tiny model's shape, from configs/tiny.py (its one home): tests that build a model without
a training config (Hugging Face directories, fine-tuning) take it from here."""

from configs import tiny

_MODEL = tiny.get_config().model

SHAPE = dict(
    hidden_size=_MODEL.hidden_size,
    num_hidden_layers=_MODEL.num_hidden_layers,
    num_attention_heads=_MODEL.num_attention_heads,
    intermediate_size=_MODEL.intermediate_size,
)
