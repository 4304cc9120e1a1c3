"""Where a run's first state comes from: the kind of directory train.init_checkpoint or --init
names, and pre-training's initial state from it (bert_jax/training/init_checkpoint.py)."""

import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax import cli, storage
from bert_jax.model import encoder
from bert_jax.training import init_checkpoint, pretrain
from configs import tiny


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_one_rule_tells_the_kinds_of_directory_apart(where, tmp_path, request):
    """init_checkpoint.model_dir_kind, behind pretrained.load(), export, and pre-training's
    train.init_checkpoint (which used its own config.json test before): checkpoints/ makes a workdir
    whatever else is there; config.json or Google's bert_config.json a Hugging Face directory;
    anything else is refused by name, in a bucket as on disk."""
    root = str(tmp_path) if where == "local" else request.getfixturevalue("bucket")
    layouts = {
        "workdir": ["checkpoints/4/params/x"],
        "both": ["checkpoints/4/params/x", "config.json"],
        "hf": ["config.json", "model.safetensors"],
        "tf": ["bert_config.json", "bert_model.ckpt.index"],
        "neither": ["vocab.txt"],
    }
    for name, files in layouts.items():
        for f in files:
            path = storage.join(root, name, f)
            storage.makedirs(storage.dirname(path))  # nothing to make in a bucket
            storage.write_bytes(path, b"{}")
    kinds = {
        name: init_checkpoint.model_dir_kind(storage.join(root, name))
        for name in layouts
        if name != "neither"
    }
    assert kinds == {
        "workdir": init_checkpoint.WORKDIR,
        "both": init_checkpoint.WORKDIR,
        "hf": init_checkpoint.HF_DIR,
        "tf": init_checkpoint.HF_DIR,
    }
    with pytest.raises(cli.UserError, match=r"has no config.json .* and no checkpoints/"):
        init_checkpoint.model_dir_kind(storage.join(root, "neither"))
    with pytest.raises(cli.UserError, match="is not a directory"):
        init_checkpoint.model_dir_kind(storage.join(root, "neither", "vocab.txt"))
    with pytest.raises(cli.UserError, match="no pre-trained model given"):
        init_checkpoint.model_dir_kind("")


def _tiny(**model):
    config = tiny.get_config()
    config.mesh.num_devices = 1
    config.model.update(model)
    return config


def test_init_checkpoint_of_another_model_is_refused_before_restoring(
    tmp_path, save_checkpoint, capsys
):
    """train.init_checkpoint = a workdir whose model has other shapes than the run's: one error
    naming the fields (its arrays were put on the run's shardings as they were, and the first
    step died in a reshape TypeError); other settings (dropout) only a note."""
    workdir = str(tmp_path / "run")
    saved = _tiny()
    model_config = encoder.BertConfig.from_config_dict(saved.model)
    save_checkpoint(workdir, encoder.BertForPreTraining(model_config, rngs=nnx.Rngs(0)), saved, 7)
    bigger = _tiny(hidden_size=64, intermediate_size=128)
    bigger.train.init_checkpoint = workdir
    setup = pretrain.make_setup(bigger)
    with pytest.raises(cli.UserError, match=r"hidden_size=32 \(this run: 64\), intermediate_size"):
        init_checkpoint.initial_state(bigger.train, setup, lambda: {})
    same = _tiny(hidden_dropout_prob=0.2)
    same.train.init_checkpoint = workdir
    setup = pretrain.make_setup(same)
    state = init_checkpoint.initial_state(same.train, setup, lambda: {})
    assert jax.tree.map(np.shape, state["params"]) == jax.tree.map(
        np.shape, setup.abstract_state["params"]
    )
    assert "other model settings: ['hidden_dropout_prob']" in capsys.readouterr().out
