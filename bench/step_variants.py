"""Pieces of the train step computed another way, for A/B runs of bench/train_bench.py.

  python -m bench.train_bench --models=base --torch=false --rounds=5 \\
      --variant=erfc:patch=gelu_erfc --variant=sep:patch=qkv_separate

Each patch is a context manager that replaces one function of bert_jax while a variant's step
is traced (runners.OursRunner(patch=...)); the step compiled under it keeps the replacement, the
other sides of the same run do not see it. They hold the *other* way of computing a piece: the
way the code did it before a change measured here (so the change's before/after stays
reproducible in one process), or a candidate not adopted (docs/performance.md says which and
why). Every patch computes the same loss and gradients as the code it replaces, up to float
rounding, unless its docstring says otherwise.
"""

import contextlib

import jax
import jax.numpy as jnp


@contextlib.contextmanager
def _replace(owner, name: str, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def gelu_erfc():
    """Exact GELU as jax.nn.gelu(approximate=False) computes it: 0.5 x erfc(-x / sqrt 2)."""
    from bert_jax.model import layers

    return _replace(layers, "gelu", lambda x: jax.nn.gelu(x, approximate=False))


def gelu_erf():
    """Exact GELU as HF and google-research/bert write it: 0.5 x (1 + erf(x / sqrt 2))."""
    from bert_jax.model import layers

    def gelu(x):
        return (0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(0.5**0.5, x.dtype)))).astype(x.dtype)

    return _replace(layers, "gelu", gelu)


def qkv_separate():
    """Query, key and value as three matmuls of their own (no stacked kernel)."""
    from bert_jax.model import layers

    def project(self, x):
        return tuple(p(x) for p in (self.query, self.key, self.value))

    return _replace(layers.SelfAttention, "_project_qkv", project)


def bf16_dots_xla():
    """bfloat16 matmuls as XLA:CPU compiles a plain bfloat16 einsum: both operands converted to
    float32, a float32 matmul (bert_jax/model/mixed_matmul.py's CPU path off)."""
    from bert_jax.model import mixed_matmul

    return _replace(mixed_matmul, "_on_cpu", lambda: False)


def softmax_autodiff():
    """The attention's softmax and dropout differentiated by autodiff (which keeps the float32
    logits for the backward pass) instead of attention.softmax_dropout's own backward pass."""
    from bert_jax.model import attention
    from bert_jax.model.dropout import dropout

    def softmax_dropout(logits, rng, rate, dtype):
        return dropout(jax.nn.softmax(logits, axis=-1), rate, rng).astype(dtype)

    return _replace(attention, "softmax_dropout", softmax_dropout)


PATCHES = {
    "gelu_erfc": gelu_erfc,
    "gelu_erf": gelu_erf,
    "qkv_separate": qkv_separate,
    "bf16_dots_xla": bf16_dots_xla,
    "softmax_autodiff": softmax_autodiff,
}


def patches(names: list[str]):
    """One context manager applying PATCHES[name] for every name; None for no names."""
    if not names:
        return None
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patches {unknown}; known: {sorted(PATCHES)}")
    return _applied(names)


@contextlib.contextmanager
def _applied(names):
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(PATCHES[name]())
        yield
