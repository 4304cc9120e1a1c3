"""The collapsed-representation check: the cosine figure against a brute-force reference, a
deliberately collapsed model against a healthy one, and the trainer's warning line."""

import jax
import numpy as np
import pytest

from bert_jax.data.input import pipeline
from bert_jax.training import collapse, pretrain


def _reference_cosine(sequence, weights):
    """Mean cosine over every pair of weighted tokens in different rows, pair by pair."""
    vectors, rows = [], []
    for b in range(sequence.shape[0]):
        for t in range(sequence.shape[1]):
            if weights[b, t]:
                vectors.append(sequence[b, t] / np.linalg.norm(sequence[b, t]))
                rows.append(b)
    cos = np.array(vectors) @ np.array(vectors).T
    rows = np.array(rows)
    return cos[rows[:, None] != rows[None, :]].mean()


@pytest.mark.parametrize("seed", range(3))
def test_cross_row_cosine_matches_the_pairwise_mean(seed):
    rng = np.random.default_rng(seed)
    # A shared direction plus noise, so the mean cosine is well away from 0.
    sequence = rng.normal(size=(5, 7, 16)) + 2.0 * rng.normal(size=16)
    weights = (rng.random((5, 7)) < 0.7).astype(np.float32)
    got = float(collapse.cross_row_cosine(sequence.astype(np.float32), weights))
    assert got == pytest.approx(_reference_cosine(sequence, weights), abs=1e-5)
    # Tokens of the same row are never paired: identical copies within each row, different rows
    # orthogonal, read 0.
    same_within = np.zeros((2, 3, 4), np.float32)
    same_within[0, :, 0], same_within[1, :, 1] = 1.0, 1.0
    assert float(collapse.cross_row_cosine(same_within, np.ones((2, 3)))) == pytest.approx(0.0)


@pytest.fixture(scope="module")
def model_and_batch(testdata):
    from support.golden import small_config

    config = small_config(testdata)
    setup = pretrain.make_setup(config)
    params = pretrain.jit_init(setup, seed=0)()["params"]
    batch = pipeline.eval_batches(config.data, config.data.eval_files, 30522, 16, 12)[0]
    return setup, jax.device_get(params), batch


def _last_norm(params):
    layers = params["bert"]["layers"]
    return layers[max(layers)]["output_norm"]


@pytest.mark.parametrize("scale", [0.0, 1e-5])
def test_a_collapsed_model_is_flagged_and_a_healthy_one_is_not(model_and_batch, scale):
    setup, params, batch = model_and_batch
    check = collapse.make_check(setup)
    healthy = check(params, batch)
    assert healthy < 0.5  # an initialized BERT gives different tokens different directions
    assert collapse.warning(healthy, 10) is None

    # The last LayerNorm's scale zeroed (or nearly): every token's final state is its bias, the
    # same vector everywhere (exactly, or to ~1e-5: the 0.999999 of a run stuck at the plateau).
    collapsed = jax.tree.map(np.array, params)
    norm = _last_norm(collapsed)
    norm["scale"] = np.full_like(norm["scale"], scale)
    norm["bias"] = np.random.default_rng(0).normal(size=norm["bias"].shape).astype(np.float32)
    cosine = check(collapsed, batch)
    assert cosine > collapse.THRESHOLD
    line = collapse.warning(cosine, 10)
    assert line.startswith("collapsed representations at step 10")
    assert "learning rate" in line and f"{cosine:.6f}" in line


def test_padding_rows_are_left_out(model_and_batch):
    """Eval padding rows repeat a real record: counted, they would pair a row with its copy."""
    setup, params, batch = model_and_batch
    check = collapse.make_check(setup)
    two_real = np.zeros(16, np.float32)
    two_real[:2] = 1.0
    padded = {k: np.concatenate([v[:2], np.repeat(v[:1], 14, 0)]) for k, v in batch.items()}
    with_copies = check(params, dict(padded, **{pipeline.EXAMPLE_WEIGHT: np.ones(16)}))
    padded[pipeline.EXAMPLE_WEIGHT] = two_real
    figure = check(params, padded)
    # The padding rows' content does not matter: the original rows 2.. give the same figure.
    assert figure == pytest.approx(
        check(params, dict(batch, **{pipeline.EXAMPLE_WEIGHT: two_real})), abs=1e-6
    )
    # Copies of row 0 would pair each of its tokens with itself (cosine 1): a higher figure.
    assert with_copies > figure + 0.002
