"""Which code points the every-code-point tokenizer tests try.

All 1,112,064 (every code point but the surrogates, which UTF-8 text cannot hold) take about 4
minutes on 2 cores through the original's rules, our three paths and SentencePiece: more than
`make test`'s budget allows. So by default a test
gives `sample` a `kind` function (every property of a code point that a rule of the reference, or
a plausible reimplementation of it, looks at), the code points are cut into runs of neighbours of
one kind, and each run is tried at both ends (where an off-by-one range or table shows) and at
every STRIDE-th code point inside. BERT_JAX_EVERY_CODE_POINT=1 (`make test-unicode`) tries them
all: run it when a tokenizer changes.
"""

import os

CODE_POINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
ENDS, STRIDE = 2, 127


def sample(kind):
    """CODE_POINTS, or both ENDS and every STRIDE-th of each run of neighbours of one kind."""
    if os.environ.get("BERT_JAX_EVERY_CODE_POINT") == "1":
        return CODE_POINTS
    kinds = [kind(cp) for cp in CODE_POINTS]
    chosen, start = [], 0
    for i in range(1, len(CODE_POINTS) + 1):
        if (
            i < len(CODE_POINTS)
            and kinds[i] == kinds[start]
            and CODE_POINTS[i] == CODE_POINTS[i - 1] + 1
        ):
            continue
        run = range(start, i)
        chosen += sorted({*run[:ENDS], *run[-ENDS:], *run[STRIDE // 2 :: STRIDE]})
        start = i
    return [CODE_POINTS[i] for i in chosen]
