"""Model FLOPs of a BERT pre-training step: MFU's numerator (the planner's, and bench/'s).

The count (model FLOPs, as in the PaLM paper's MFU: what the model needs, not what a given
implementation spends; a multiply-add is 2 FLOPs; only matmuls are counted):

    forward, per sequence of length L with P masked positions, H hidden, I intermediate,
    N layers, V vocabulary:
        encoder    N * (L * 2 * (4*H*H + 2*H*I)      Q, K, V, output projections and the FFN
                        + 2 * 2 * L*L*H)             Q K^T and probs V over all heads
        pooler     2*H*H + 2*H*2                     [CLS] dense and the NSP classifier
        MLM head   P * (2*H*H + 2*H*V)               transform dense and the tied vocabulary
                                                     projection, on the P masked positions only
    train step = 3 * forward * batch                 backward = 2x forward (grads of inputs
                                                     and of weights)

Embedding lookups, LayerNorm, softmax, GELU, dropout and the optimizer update are not counted
(they are memory-bound and small next to the matmuls). Attention counts the full L x L, padding
included, as the MFU convention does. The MLM head is counted on P positions: an implementation
that projects all L positions (transformers' BertForPreTraining does) spends more FLOPs than this
for the same useful work, so its MFU by this count is lower than its hardware utilisation.
"""


def forward_flops_per_sequence(
    hidden: int, layers: int, intermediate: int, vocab: int, seq_len: int, num_predictions: int
) -> int:
    """Matmul FLOPs of one forward pass over one sequence (see the module docstring)."""
    h, length = hidden, seq_len
    encoder = layers * (
        length * 2 * (4 * h * h + 2 * h * intermediate) + 2 * 2 * length * length * h
    )
    pooler = 2 * h * h + 2 * h * 2
    mlm = num_predictions * (2 * h * h + 2 * h * vocab)
    return encoder + pooler + mlm


def train_flops_per_step(model_config, batch_size: int, seq_len: int, num_predictions: int) -> int:
    """Model FLOPs of one training step (forward + backward) of a bert_jax BertConfig."""
    c = model_config
    return (
        3
        * batch_size
        * forward_flops_per_sequence(
            c.hidden_size,
            c.num_hidden_layers,
            c.intermediate_size,
            c.vocab_size,
            seq_len,
            num_predictions,
        )
    )
