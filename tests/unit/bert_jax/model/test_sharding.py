"""Mesh construction, logical->mesh rules, and the same loss and gradients on every mesh shape."""

import functools
import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import cli
from bert_jax.data.contract import features as F
from bert_jax.data.input import pipeline as ip
from bert_jax.model import sharding
from bert_jax.training import pretrain
from configs import default, tiny
from support import gradients

RULES = default.get_config().mesh.rules


def test_mesh_shape_fills_one_axis_and_checks_the_product():
    assert sharding.mesh_shape(-1, 2, 1, 8) == (4, 2, 1)
    assert sharding.mesh_shape(2, 2, 2, 8) == (2, 2, 2)
    with pytest.raises(ValueError, match="needs 4 devices, there are 8"):
        sharding.mesh_shape(2, 2, 1, 8)
    with pytest.raises(ValueError, match="at most one"):
        sharding.mesh_shape(-1, -1, 1, 8)
    with pytest.raises(ValueError, match="not divisible"):
        sharding.mesh_shape(-1, 3, 1, 8)


def test_trainer_mesh_on_cpu_devices_keeps_their_order():
    """The ICI-ring and multi-slice layouts are for TPU devices: on CPU (and GPU) the trainer's
    mesh is the devices in order, reshaped, as before them (tests/e2e/test_plan.py has
    TPU's)."""
    for shape in [(8, 1, 1), (2, 2, 2), (4, 2, 1), (1, 1, 8)]:
        mesh = sharding.make_mesh(*shape)
        assert mesh.devices.shape == shape
        assert [d.id for d in mesh.devices.flat] == [d.id for d in jax.devices()]
    assert sharding.num_slices(jax.devices()) == 1


def test_logical_rules_respect_divisibility_and_axis_reuse():
    mesh = sharding.make_mesh(2, 2, 2)
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    spec = sharding.logical_to_mesh_spec
    assert spec(("vocab", "embed"), (30522, 32), mesh, RULES) == P("tensor", "fsdp")
    # 30522 rows do not split 4 ways: that dim stays whole instead of failing at compile time.
    mesh4 = sharding.make_mesh(2, 1, 4)
    assert spec(("vocab", "embed"), (30522, 32), mesh4, RULES) == P(None, None)
    assert spec(("embed", "mlp"), (32, 64), mesh4, RULES) == P(
        None, "tensor"
    )  # fsdp=1 splits nothing
    # One mesh axis per array: the second 'heads' dim cannot reuse 'tensor'.
    assert spec(("heads", "heads"), (8, 8), mesh, RULES) == P("tensor", None)
    assert sharding.batch_spec(RULES) == P(("data", "fsdp"))
    with pytest.raises(ValueError, match="unknown mesh axes"):
        sharding.normalize_rules([("embed", "model")])


@pytest.mark.parametrize(
    "rules",
    [
        None,
        3,
        "batch",
        [None],
        [3],
        [("batch",)],
        [(1, "data")],
        [("batch", 3)],
        [("batch", ("data", 3))],
        [("batch", {"data": 1})],
        [["embed", ["fsdp", None]]],
    ],
)
def test_rules_of_any_wrong_shape_are_a_user_error(rules):
    """--config.mesh.rules=None was a TypeError traceback ("NoneType has no len()"), a rule whose
    mesh axes were a number another: every shape of mistake is one line naming the rule."""
    with pytest.raises(cli.UserError, match="mesh"):
        sharding.normalize_rules(rules)


def _config():
    config = tiny.get_config()
    config.model.num_attention_heads = 4  # so a 4-way tensor axis splits whole heads
    config.train.num_train_steps = 10
    config.optim.warmup_steps = 1
    return config


@pytest.fixture(scope="module")
def batch(testdata):
    d = default.get_config().data
    d.train_files = str(testdata / "pydocs_small.L128.P20.dupe2.tfrecord")
    d.max_seq_length, d.max_predictions_per_seq, d.dynamic_masking = 128, 20, False
    d.read_threads = 1
    return next(iter(ip.train_dataset(d, 30522, 16, seed=0)))


@pytest.fixture(scope="module")
def reference(batch):
    config = _config()
    setup = pretrain.make_setup(config, devices=jax.devices()[:1])
    params = jax.device_get(pretrain.jit_init(setup, seed=0)()["params"])
    loss, grads = gradients.loss_and_grads(setup, params, batch, jax.random.PRNGKey(0))
    return params, float(loss), jax.device_get(grads)


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 4, 1), (2, 2, 2), (1, 2, 4)])
def test_loss_and_gradients_match_a_single_device(shape, batch, reference):
    params, ref_loss, ref_grads = reference
    config = _config()
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = shape
    setup = pretrain.make_setup(config)
    assert dict(setup.mesh.shape) == dict(zip(("data", "fsdp", "tensor"), shape))
    sharded = jax.device_put(params, setup.param_shardings)
    loss, grads = gradients.loss_and_grads(setup, sharded, batch, jax.random.PRNGKey(0))
    # The weights really are split: a layer kernel's shards are smaller than the whole.
    kernel = grads["bert"]["layers"][0]["intermediate"]["kernel"]
    if shape[1] * shape[2] > 1:
        assert kernel.addressable_shards[0].data.size < kernel.size
    assert float(loss) == pytest.approx(ref_loss, rel=1e-5)
    for (path, g), r in zip(
        jax.tree_util.tree_flatten_with_path(jax.device_get(grads))[0], jax.tree.leaves(ref_grads)
    ):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))
    assert batch[F.INPUT_IDS].shape[0] == 16


def test_update_sharding_splits_each_parameter_over_the_free_batch_axes():
    mesh = sharding.make_mesh(2, 4, 1)
    rules = sharding.normalize_rules(default.get_config().mesh.rules)
    whole = NamedSharding(mesh, P())
    # A replicated [30522, 32] table: 30522 rows do not divide 8, its 32 columns do.
    assert sharding.update_sharding(whole, (30522, 32), rules).spec == P(None, ("data", "fsdp"))
    # The first dimension the free axes divide, whole rows: [32, 128] splits its 32 rows.
    assert sharding.update_sharding(whole, (32, 128), rules).spec == P(("data", "fsdp"), None)
    # fsdp already splits the rows 4 ways; data splits them further where 8 rows remain.
    fsdp = NamedSharding(mesh, P("fsdp", None))
    assert sharding.update_sharding(fsdp, (32, 128), rules).spec == P(("fsdp", "data"), None)
    # ... and takes the next dimension where the rows do not divide.
    assert sharding.update_sharding(fsdp, (4, 128), rules).spec == P("fsdp", "data")
    # Nothing divides: the parameter keeps its sharding (updated whole on every device).
    assert sharding.update_sharding(whole, (3,), rules) is whole
    # A dimension that takes only one of the free axes gets the larger one.
    assert sharding.update_sharding(whole, (4,), rules).spec == P("fsdp")


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 2, 2)])
def test_sharded_weight_update_equals_the_replicated_one_over_20_steps(shape, batch):
    """Weight-update sharding changes where each element of the update is computed, not what:
    20 steps of the real train step (dropout, clipping, AdamW) end at the same parameters and
    losses as with every device updating everything, and the moments really are split."""
    runs = {}
    for shard_update in (False, True):
        config = _config()
        config.train.num_train_steps = 20
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor = shape
        config.mesh.shard_update = shard_update
        setup = pretrain.make_setup(config)
        state = pretrain.jit_init(setup, seed=0)()
        step = pretrain.jit_train_step(setup)
        lr = setup.lr_on_mesh()
        global_batch = sharding.host_to_global(batch, setup.batch_sharding)
        losses = []
        with setup.activate():
            for _ in range(20):
                state, metrics = step(state, global_batch, lr)
                losses.append(float(metrics["loss"]))
        adam = next(s for s in state["opt_state"] if hasattr(s, "mu"))
        mu = adam.mu["bert"]["layers"][0]["intermediate"]["kernel"]
        runs[shard_update] = (losses, jax.device_get(state["params"]), mu)
    (ref_losses, ref_params, ref_mu), (losses, params, mu) = runs[False], runs[True]
    # The replicated moments are whole on each device; the sharded ones an 8th of them there.
    assert ref_mu.addressable_shards[0].data.size * math.prod(shape[1:]) == ref_mu.size
    assert mu.addressable_shards[0].data.size * 8 == mu.size
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert losses[-1] < losses[0]
    for (path, p), r in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(ref_params)
    ):
        np.testing.assert_allclose(p, r, rtol=1e-4, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_tpu_compiler_flags_join_libtpu_init_args_unless_the_user_set_them():
    env = {}
    sharding.use_tpu_compiler_flags(env)
    assert env["LIBTPU_INIT_ARGS"].split() == list(sharding.TPU_COMPILER_FLAGS)
    mine = "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=true --xla_foo=1"
    env = {"LIBTPU_INIT_ARGS": mine}
    sharding.use_tpu_compiler_flags(env)
    assert env["LIBTPU_INIT_ARGS"].split() == [*mine.split(), sharding.TPU_COMPILER_FLAGS[1]]


SHAPES_OF_8 = [(d, f, 8 // (d * f)) for d in (1, 2, 4, 8) for f in (1, 2, 4, 8) if d * f <= 8]


@pytest.mark.parametrize("shape", SHAPES_OF_8)
def test_a_batch_split_fewer_ways_than_the_processes_is_refused(shape):
    """Each process feeds its own rows of a batch (host_to_global). Every mesh of 8 devices
    laid out over 2, 4 or 8 processes (each holding consecutive devices, as on a GPU cluster or
    CPU): one that splits the batch fewer ways than there are processes, or not a multiple of
    them, is refused naming the split (2 processes on data 1 x fsdp 1 x tensor 4 raised a
    ZeroDivisionError in the step); every other passes. 1 process: always fine."""
    mesh = sharding.make_mesh(*shape)
    rules = sharding.normalize_rules(RULES)
    sharding.check_batch_split(mesh, rules, 1)
    for procs in (2, 4, 8):
        host = functools.partial(lambda d, k: d.id // k, k=8 // procs)
        if (shape[0] * shape[1]) % procs:
            with pytest.raises(ValueError, match=f"each of the {procs} processes"):
                sharding.check_batch_split(mesh, rules, procs, process_of=host)
        else:
            sharding.check_batch_split(mesh, rules, procs, process_of=host)
