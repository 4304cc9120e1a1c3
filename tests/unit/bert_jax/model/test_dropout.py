"""The model's dropout masks: rate, independence across keys and positions, sharding invariance."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax.model.dropout import dropout


def _masks(key, shape, rate=0.1):
    return np.asarray(dropout(jnp.ones(shape, jnp.float32), rate, key) != 0)


def test_keep_rate_scale_and_independence():
    key = jax.random.key(0)
    keep = _masks(key, (16, 12, 128, 128))
    # 3.1M draws: the keep rate is within 5 standard deviations (1e-3) of 1 - 6554/65536.
    assert abs(keep.mean() - (1 - 6554 / 65536)) < 1e-3
    kept = np.asarray(dropout(jnp.ones((4, 8)), 0.1, key))
    np.testing.assert_allclose(kept[kept != 0], 65536 / (65536 - 6554), rtol=1e-6)
    # Two independent masks agree where both keep or both drop: 0.9^2 + 0.1^2 = 0.82.
    other_key = _masks(jax.random.key(1), (16, 12, 128, 128))
    assert abs((keep == other_key).mean() - 0.82) < 2e-3
    assert abs((keep[0] == keep[1]).mean() - 0.82) < 5e-3  # rows
    assert abs((keep[..., :-1] == keep[..., 1:]).mean() - 0.82) < 2e-3  # neighbours
    assert abs((keep & keep[..., ::-1]).mean() - 0.81) < 2e-3


def test_same_mask_under_any_sharding():
    key, shape = jax.random.key(3), (8, 4, 16, 16)
    mesh = jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.device_put(jnp.ones(shape), NamedSharding(mesh, P("x")))
    sharded = jax.jit(lambda x: dropout(x, 0.1, key))(x)
    assert len(sharded.sharding.device_set) == 8
    np.testing.assert_array_equal(np.asarray(sharded) != 0, _masks(key, shape))
