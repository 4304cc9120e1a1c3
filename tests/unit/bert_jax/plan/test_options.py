"""What the planner is asked (bert_jax/plan/options.py), checked before anything compiles."""

import types

import pytest

from bert_jax import cli
from bert_jax.plan import options
from configs import tiny


def _flags(**overrides):
    values = dict(
        topology="cpu:8",
        num_devices=None,
        meshes=["8x1x1"],
        remat=["false"],
        global_batch_sizes=["0"],
        steps=["train"],
        seq_len=0,
        num_layers=0,
        vocab_size=None,
        dtype="bfloat16",
        attention_dropout=-1.0,
        json_out="",
        hlo_dir="",
        top=10,
    )
    return types.SimpleNamespace(**{**values, **overrides})


@pytest.mark.parametrize("edit", ["rename", "repeat"])
def test_a_mesh_rule_for_a_name_the_model_lacks_or_a_name_twice_is_refused_by_the_planner(edit):
    """The planner reads config.mesh.rules without the trainers' config check: a rule for a
    logical axis the model does not name, or a second rule for one, is refused there too
    (sharding.normalize_rules), before anything compiles; the shipped rules plan."""
    config = tiny.get_config()
    assert options.request(_flags(), config, 1).meshes == [(8, 1, 1)]
    name, axes = config.mesh.rules[0]
    if edit == "rename":
        config.mesh.rules = ((name[:-1], axes), *config.mesh.rules[1:])
        want = f"mesh.rules names logical axes the model does not have: ['{name[:-1]}']"
    else:
        config.mesh.rules = (*config.mesh.rules, (name, axes))
        want = f"mesh.rules has more than one rule for ['{name}']: one rule per name"
    with pytest.raises(cli.UserError, match=want.replace("[", r"\[").replace("]", r"\]")):
        options.request(_flags(), config, 1)


@pytest.mark.parametrize("topology", ["v5e-4", "cpu:4"])
def test_num_devices_with_a_topology_that_has_its_own_count_is_refused_by_the_library(topology):
    """The binary's check is the request builder's, so a library caller gets it too (before,
    request() planned for the topology's count, the num_devices asked for ignored)."""
    with pytest.raises(
        cli.UserError, match=f"--num_devices=4 is for --topology=cpu .*--topology={topology} has"
    ):
        options.request(_flags(topology=topology, num_devices=4), tiny.get_config(), 1)
    config = tiny.get_config()
    assert options.request(_flags(topology="cpu", num_devices=8), config, 1).num_devices == 8
