"""Model FLOPs of a pre-training step: MFU's numerator (the planner's, and bench/'s), for the 2018
BERT block and the modern one (GeGLU, sliding-window layers, no pooler or NSP head).

The count (model FLOPs, as in the PaLM paper's MFU: what the model needs, not what a given
implementation spends; a multiply-add is 2 FLOPs; only matmuls are counted):

    forward, per sequence of length L with P masked positions, H hidden, I intermediate,
    N layers, V vocabulary:
        encoder    sum over layers of
                     L * 2 * (4*H*H + 2*H*I)     Q, K, V, output projections and the FFN
                                                 (GeGLU: 4*H*H + 3*H*I, its input
                                                 projection H -> 2*I, its output I -> H)
                   + 2 * 2 * pairs * H           Q K^T and probs V over all heads, `pairs` the
                                                 query-key pairs the layer scores (below)
        pooler     2*H*H + 2*H*2                 [CLS] dense and the NSP classifier (each only
                                                 where the model has it: ModernBERT has neither)
        MLM head   P * (2*H*H + 2*H*V)           transform dense and the tied vocabulary
                                                 projection, on the P masked positions only
    train step = 3 * forward * batch             backward = 2x forward (grads of inputs
                                                 and of weights)

`pairs`: a global layer scores all L x L, padding and the boundaries of packed documents
included, as the MFU convention does (a step's documents are not known when it is planned). A
sliding-window layer (a query reads the keys at most w positions away) needs only the band,
L * (2w + 1) - w * (w + 1) pairs: that is what the model FLOPs count. A block-sparse kernel
computes more: the splash kernel scores every block x block tile that the band touches (it
skips only whole tiles outside it), `attention_pairs(..., block=...)`; the planner's roofline
takes its compute from those kernel FLOPs (steps.py), MFU from the model FLOPs, so a windowed
layer's wasted tiles show as lower MFU, not as faster steps. At ModernBERT's window (64 on
either side) and splash's 512-token tiles a 1,024-token row's band touches all four tiles (the
kernel does full attention's work for a band of 12% of it) and an 8,192-token row's 46 of 256.

Embedding lookups, LayerNorm, softmax, GELU, RoPE's rotations, dropout and the optimizer update
are not counted (they are memory-bound and small next to the matmuls). The MLM head is counted on
P positions: an implementation that projects all L positions (transformers' BertForPreTraining
does) spends more FLOPs than this for the same useful work, so its MFU by this count is lower
than its hardware utilisation.
"""


def attention_pairs(seq_len: int, window: int | None = None, block: int | None = None) -> int:
    """Query-key pairs one head of a layer scores per sequence (the module docstring): all
    L x L for a global layer (window None); the band |q - k| <= window for a sliding-window
    layer; with `block`, the pairs of the block x block tiles the band touches instead (what a
    block-sparse kernel computes; `block` must divide the length)."""
    length = seq_len
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


def layer_windows(model_config) -> list[int | None]:
    """Each layer's window (how far a query reads on either side; None: the whole row)."""
    c = model_config
    return [c.attention_window(i) for i in range(c.num_hidden_layers)]


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
    """Matmul FLOPs of one forward pass over one sequence (see the module docstring). BERT's by
    default; `glu`: a GeGLU feed-forward; `windows`: each layer's window (None entries: global;
    default all global); `pooler`, `nsp`: whether the model has BERT's pooler dense and NSP
    classifier; `attention_block`: count the
    tiles a block-sparse kernel computes instead of the band (the kernel's FLOPs)."""
    h, length = hidden, seq_len
    windows = [None] * layers if windows is None else list(windows)
    if len(windows) != layers:
        raise ValueError(f"{len(windows)} windows for {layers} layers")
    ffn = 3 * h * intermediate if glu else 2 * h * intermediate
    dense = layers * length * 2 * (4 * h * h + ffn)
    attention = sum(
        2 * 2 * attention_pairs(length, w, None if w is None else attention_block) * h
        for w in windows
    )
    heads = (2 * h * h if pooler else 0) + (2 * h * 2 if nsp else 0)
    mlm = num_predictions * (2 * h * h + 2 * h * vocab)
    return dense + attention + heads + mlm


def model_forward_flops(
    model_config, seq_len: int, num_predictions: int, attention_block: int | None = None
) -> int:
    """forward_flops_per_sequence of a bert_jax BertConfig, either block."""
    c = model_config
    return forward_flops_per_sequence(
        c.hidden_size,
        c.num_hidden_layers,
        c.intermediate_size,
        c.vocab_size,
        seq_len,
        num_predictions,
        glu=c.mlp_type == "geglu",
        windows=layer_windows(c),
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
    """Model FLOPs of one training step (forward + backward) of a bert_jax BertConfig; with
    `attention_block`, the FLOPs a block-sparse attention kernel spends instead (the module
    docstring)."""
    forward = model_forward_flops(model_config, seq_len, num_predictions, attention_block)
    return 3 * batch_size * forward
