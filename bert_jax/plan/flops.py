"""Model FLOPs of a pre-training step, MFU's numerator (the planner's and bench/'s), for both
blocks, by the PaLM paper's convention (what the model needs, not what an implementation spends).
docs/scaling.md, "Planning a TPU run without a TPU": the formula and what it leaves out.
"""


def attention_pairs(length: int, window: int | None = None, block: int | None = None) -> int:
    """Query-key pairs one head of a layer scores per sequence: L x L for a global layer (window
    None), the band |q - k| <= window for a sliding one; with `block`, the pairs of the tiles
    the band touches (what a block-sparse kernel computes)."""
    if window is None or window >= length - 1:
        return length * length
    if block is None:
        return length * (2 * window + 1) - window * (window + 1)
    if length % block:
        raise ValueError(f"block {block} does not divide the length {length}")
    blocks = length // block
    tiles = 0
    for i in range(blocks):  # key tiles within `window` of query tile i's first and last rows
        first = max(0, (i * block - window) // block)
        last = min(blocks - 1, (i * block + block - 1 + window) // block)
        tiles += last - first + 1
    return tiles * block * block


def forward_flops_per_sequence(
    hidden: int,
    layers: int,
    intermediate: int,
    vocab: int,
    seq_len: int,
    num_predictions: int,
    *,
    glu: bool = False,
    windows: list[int | None] | None = None,
    pooler: bool = True,
    nsp: bool = True,
    attention_block: int | None = None,
) -> int:
    """Matmul FLOPs of one forward pass over one sequence, BERT's by default; `windows`: each
    layer's (None: global); `attention_block`: a block-sparse kernel's tiles instead."""
    h = hidden
    windows = [None] * layers if windows is None else windows
    ffn = 3 * h * intermediate if glu else 2 * h * intermediate
    dense = layers * seq_len * 2 * (4 * h * h + ffn)
    attention = sum(
        2 * 2 * attention_pairs(seq_len, w, None if w is None else attention_block) * h
        for w in windows
    )
    heads = (2 * h * h if pooler else 0) + (2 * h * 2 if nsp else 0)
    mlm = num_predictions * (2 * h * h + 2 * h * vocab)
    return dense + attention + heads + mlm


def model_forward_flops(
    model_config, seq_len: int, num_predictions: int, attention_block: int | None = None
) -> int:
    c = model_config
    return forward_flops_per_sequence(
        c.hidden_size,
        c.num_hidden_layers,
        c.intermediate_size,
        c.vocab_size,
        seq_len,
        num_predictions,
        glu=c.mlp_type == "geglu",
        windows=[c.attention_window(i) for i in range(c.num_hidden_layers)],
        pooler=bool(c.pooler),
        nsp=bool(c.nsp_head),
        attention_block=attention_block,
    )


def train_flops_per_step(
    model_config,
    batch_size: int,
    seq_len: int,
    num_predictions: int,
    attention_block: int | None = None,
) -> int:
    forward = model_forward_flops(model_config, seq_len, num_predictions, attention_block)
    return 3 * batch_size * forward
