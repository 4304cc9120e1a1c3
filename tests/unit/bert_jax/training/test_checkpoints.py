"""Orbax checkpoints: restore onto another mesh, iterator position, retention, restore_params."""

import functools
import json
import pathlib
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from bert_jax import cli, storage
from bert_jax.data.input import pipeline
from bert_jax.model import encoder
from bert_jax.training import checkpoints, config_check, pretrain
from configs import tiny
from support.checkpoints import FLIPPED_PARAMS, saved_steps
from support.golden import golden_data


def _config(testdata, data, fsdp, tensor, num_devices):
    config = golden_data(tiny.get_config(), testdata)
    config.data.train_files = str(testdata / "sample_text.L128.P20.dupe5.tfrecord")
    config.data.read_threads = 1
    config.train.num_train_steps = 10
    config.optim.warmup_steps = 1
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = data, fsdp, tensor
    config.mesh.num_devices = num_devices
    return config


@pytest.fixture(scope="module")
def saved(testdata, tmp_path_factory):
    """A state made on 8 devices as a 4x2 (data x fsdp) mesh, saved at step 7 with the data 3
    batches in."""
    workdir = str(tmp_path_factory.mktemp("run"))
    config = _config(testdata, 4, 2, 1, 8)
    setup = pretrain.make_setup(config)
    state = pretrain.jit_init(setup, seed=0)()
    it = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    for _ in range(3):
        next(it)
    manager = checkpoints.make_manager(workdir, max_to_keep=2)
    checkpoints.save(manager, 7, state, it, config)
    manager.wait_until_finished()
    manager.close()
    return workdir, config, jax.device_get(state), next(it)


@pytest.mark.parametrize(
    "data, fsdp, tensor, num_devices",
    [
        (2, 4, 1, 8),  # the same devices as 2x4: each weight split 4 ways instead of 2
        (1, 2, 2, 4),  # half the devices, and the tensor axis now splits weights too
        (2, 1, 1, 2),  # two devices, everything replicated
    ],
)
def test_restores_onto_a_different_mesh_with_the_data_position(
    testdata, saved, data, fsdp, tensor, num_devices
):
    workdir, _, state, next_batch = saved
    config = _config(testdata, data, fsdp, tensor, num_devices)
    setup = pretrain.make_setup(config)
    it = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    manager = checkpoints.make_manager(workdir)
    restored = checkpoints.restore(manager, 7, setup.abstract_state, it)
    manager.close()
    for (path, got), want, sharding in zip(
        jax.tree_util.tree_flatten_with_path(restored)[0],
        jax.tree.leaves(state),
        jax.tree.leaves(setup.state_shardings),
    ):
        assert got.sharding == sharding, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=jax.tree_util.keystr(path))
    for k, v in next(it).items():  # the iterator continues where the saved run was
        np.testing.assert_array_equal(v, next_batch[k])


def test_restores_a_checkpoint_written_before_the_nonfinite_count(testdata, saved, tmp_path):
    _, config, state, _ = saved
    older = {k: v for k, v in state.items() if k != "nonfinite_steps"}  # the layout before it
    manager = checkpoints.make_manager(str(tmp_path))
    checkpoints.save(
        manager, 7, older, iter(pipeline.train_dataset(config.data, 30522, 8, seed=0)), config
    )
    manager.wait_until_finished()
    restored = checkpoints.restore(manager, 7, pretrain.make_setup(config).abstract_state)
    manager.close()
    assert int(restored["nonfinite_steps"]) == 0 and int(restored["step"]) == int(state["step"])
    for got, want in zip(
        jax.tree.leaves(restored["opt_state"]), jax.tree.leaves(state["opt_state"])
    ):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_restore_params_gives_parameters_and_config(saved):
    workdir, config, state, _ = saved
    params, saved_config = checkpoints.restore_params(workdir)
    assert saved_config.model.to_dict() == config.model.to_dict()
    assert saved_config.data.train_files == config.data.train_files
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(state["params"])):
        np.testing.assert_array_equal(np.asarray(got), want)
    assert jax.tree.leaves(params)[0].sharding.device_set == {jax.local_devices()[0]}


def test_keeps_the_last_n(testdata, saved, tmp_path):
    _, config, state, _ = saved
    manager = checkpoints.make_manager(str(tmp_path), max_to_keep=2, async_save=True)
    it = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    small = {**state, "params": state["params"]}
    for step in (1, 2, 3, 4):
        checkpoints.save(manager, step, small, it, config)
    manager.wait_until_finished()
    manager.close()
    assert saved_steps(str(tmp_path)) == [3, 4]


def test_checksums_catch_what_orbax_restores_silently(testdata, saved, tmp_path, flip_bytes):
    """The issue's case: a few flipped bytes inside a params file restore without an error in
    Orbax (NaNs and 3e38s in the word embeddings); the checksums refuse the step, naming it."""
    workdir = str(tmp_path / "run")
    shutil.copytree(saved[0], workdir)
    flip_bytes(f"{workdir}/checkpoints/7")
    with pytest.raises(
        checkpoints.DamagedCheckpoint,
        match=rf"checkpoints/7 is damaged: {FLIPPED_PARAMS}.*no other step is saved",
    ):
        checkpoints.restore_params(workdir)

    # Where the flip lands decides which refusal comes (FLIPPED_PARAMS); arrays that read
    # back other than they were saved always meet the checksum: here the recorded one changed.
    recorded = pathlib.Path(tmp_path, "recorded")
    shutil.copytree(saved[0], recorded)
    metadata = recorded / "checkpoints" / "7" / checkpoints.CHECKSUMS / "metadata"
    sums = json.loads(metadata.read_text())
    embedding = "bert/embeddings/word_embeddings/embedding"
    sums["items"]["params"][embedding] = f"{int(sums['items']['params'][embedding], 16) ^ 1:08x}"
    metadata.write_text(json.dumps(sums))
    with pytest.raises(
        checkpoints.DamagedCheckpoint,
        match=r"checkpoints/7 is damaged: params/bert/embeddings/word_embeddings/embedding "
        r"differs from the checksum recorded when it was saved.*no other step is saved",
    ):
        checkpoints.restore_params(str(recorded))


def test_array_files_that_do_not_read_are_damage_naming_what_tensorstore_found(saved, tmp_path):
    """Export, embed, --init and predict: a params item TensorStore cannot read (here its array
    files cut short) is a DamagedCheckpoint naming the step and TensorStore's own finding, not
    the wrapper Orbax raises around it."""
    workdir = str(tmp_path / "run")
    shutil.copytree(saved[0], workdir)
    for f in pathlib.Path(workdir, "checkpoints", "7", "params").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:16])
    with pytest.raises(checkpoints.DamagedCheckpoint) as caught:
        checkpoints.restore_params(workdir)
    message = str(caught.value)
    assert "checkpoints/7 is damaged: its params item does not read (" in message, message
    assert "no other step is saved" in message and "Encountered error" not in message, message


def test_a_checkpoint_from_before_checksums_restores_with_a_finite_check(tmp_path, save_checkpoint):
    from flax import nnx

    from bert_jax.model import encoder as M

    config = tiny.get_config()
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(1))
    save_checkpoint(tmp_path / "old", model, config, 4, with_checksums=False)
    params, _ = checkpoints.restore_params(str(tmp_path / "old"))
    want = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    model.bert.pooler.bias.value = model.bert.pooler.bias.value.at[3].set(np.nan)
    save_checkpoint(tmp_path / "nan", model, config, 4, with_checksums=False)
    with pytest.raises(
        checkpoints.DamagedCheckpoint, match=r"params/bert/pooler/bias holds NaN or inf values"
    ):
        checkpoints.restore_params(str(tmp_path / "nan"))


def test_errors_say_what_to_do(testdata, saved, tmp_path):
    workdir, _, _, _ = saved
    with pytest.raises(cli.UserError, match="no checkpoints under"):
        checkpoints.restore_params(str(tmp_path))
    with pytest.raises(ValueError, match=r"no checkpoint at step 5 .* there are \[7\]"):
        checkpoints.restore_params(workdir, step=5)
    bigger = _config(testdata, 1, 1, 1, 1)
    bigger.model.hidden_size, bigger.model.intermediate_size = 64, 128
    setup = pretrain.make_setup(bigger)
    it = iter(pipeline.train_dataset(bigger.data, 30522, 8, seed=0))
    manager = checkpoints.make_manager(workdir)
    with pytest.raises(ValueError, match="does not match this run's model"):
        checkpoints.restore(manager, 7, setup.abstract_state, it)
    manager.close()


def test_the_aftermath_of_a_failed_save_or_restore_is_not_printed(monkeypatch):
    """What Orbax and TensorStore leave behind a failed write or read reaches sys.unraisablehook
    (up to 1,581 lines of it under one error line); checkpointing's hook drops exactly that."""
    import types

    printed = []
    hook = functools.partial(checkpoints._drop_closed_loop_noise, previous=printed.append)

    async def orbax_read():  # stands in for orbax's _read_array_index_and_device_put
        pass

    orbax_code = orbax_read.__code__.replace(co_filename="/site-packages/orbax/serialization.py")
    abandoned = Exception("Encountered error while reading array index")
    abandoned.__cause__ = GeneratorExit()
    cases = [
        (RuntimeError("Event loop is closed"), None, False),
        (abandoned, types.SimpleNamespace(cr_code=orbax_code), False),
        (abandoned, types.SimpleNamespace(cr_code=orbax_read.__code__), True),  # not orbax's
        (RuntimeError("something else"), None, True),
        (ValueError("Event loop is closed too"), None, True),
    ]
    for error, obj, shown in cases:
        printed.clear()
        hook(types.SimpleNamespace(exc_value=error, object=obj))
        assert bool(printed) == shown, error


def test_orbax_log_lines_of_an_error_reported_in_one_line_are_dropped():
    """Orbax's and asyncio's logged tracebacks of an error the save or restore raises anyway (a
    full disk, a refused bucket), and a read-only manager's warning about what was asked for,
    are dropped from the absl and asyncio loggers; any other line, Orbax's or not, is kept."""
    import logging

    def record(name, path, message, exc=None):
        info = (type(exc), exc, None) if exc else None
        return logging.LogRecord(name, logging.ERROR, path, 1, message, None, info)

    orbax = "/site-packages/orbax/checkpoint/async_checkpointer.py"
    full = OSError(28, "No space left on device")
    dropped = [
        record("absl", orbax, "Given directory is read only=/w/checkpoints"),
        record("absl", orbax, "Checkpoint save failed", full),
        record("absl", orbax, "Forbidden: 403 the caller does not have storage.objects.create"),
        record("asyncio", "/usr/lib/asyncio/base_events.py", "Event loop is closed"),
    ]
    kept = [
        record("absl", orbax, "Finished saving checkpoint to /w/checkpoints/7"),
        record("absl", "/site-packages/bert_jax/x.py", "Given directory is read only"),
    ]
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        assert [r.getMessage() for r in dropped + kept if logger.filter(r)] == [
            r.getMessage() for r in kept
        ], name


def test_resume_names_the_model_fields_that_changed(testdata, saved):
    """restore_latest with the run's config.model: the same model (on another mesh) resumes; a
    wider one is one error naming each config.model field that differs, before any restore."""
    workdir, _, state, _ = saved
    same = _config(testdata, 2, 1, 1, 2)
    manager = checkpoints.make_manager(workdir)
    step, restored = checkpoints.restore_latest(
        manager, pretrain.make_setup(same).abstract_state, None, same.model.to_dict()
    )
    assert step == 7
    np.testing.assert_array_equal(
        np.asarray(restored["step"]), state["step"]
    )  # Orbax's metadata names layer '0' where the parameters' tree has 0: still the same model
    bigger = _config(testdata, 1, 1, 1, 1)
    bigger.model.hidden_size, bigger.model.intermediate_size = 64, 128
    with pytest.raises(cli.UserError) as error:
        checkpoints.restore_latest(
            manager, pretrain.make_setup(bigger).abstract_state, None, bigger.model.to_dict()
        )
    manager.close()
    assert "config.model.hidden_size=64 (the checkpoint's: 32)" in str(error.value)
    assert "config.model.intermediate_size=128 (the checkpoint's: 64)" in str(error.value)
    assert "num_hidden_layers" not in str(error.value)


@pytest.mark.parametrize(
    "edit, names",
    [
        (lambda c: c["model"].update(vocab_size="abc"), "model.vocab_size='abc'"),
        (lambda c: c["model"].update(num_hidden_layers=0), "model.num_hidden_layers=0"),
        (lambda c: c["model"].update(hidden_dropout_prob=None), "model.hidden_dropout_prob"),
        (lambda c: c.clear() or c.update(model=[1, 2]), "not a config"),
    ],
)
def test_a_config_item_edited_out_of_shape_is_damage_not_a_traceback(saved, tmp_path, edit, names):
    """A saved config (a JSON file a user may open and edit) that no run could have written: a
    field of the wrong type or out of its range, or not a config at all, is refused naming the
    step and the field, by export, embed, --init and predict alike (all read it here), instead
    of a ValueError or AttributeError from wherever the field is first used."""
    workdir = str(tmp_path / "run")
    shutil.copytree(saved[0], workdir)
    path = pathlib.Path(checkpoints.checkpoint_dir(workdir), "7", checkpoints.CONFIG, "metadata")
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    with pytest.raises(
        checkpoints.DamagedCheckpoint, match="checkpoints/7 is damaged: its config"
    ) as e:
        checkpoints.load_config(workdir, problems=config_check.range_problems)
    assert names in str(e.value)


def test_resuming_with_another_process_count_names_it_not_damage(testdata, saved, tmp_path):
    """Each process saves its own data position, so a run saved by 2 processes resumes only with
    2 (docs/scaling.md, "Limits"). Resumed by one, the missing position file was reported as
    a checkpoint "damaged, or [that] does not match this run's model or optimizer"; now the
    error names the process counts and the way on, and the checkpoint stays where it is."""
    workdir = str(tmp_path / "run")
    shutil.copytree(saved[0], workdir)
    step = pathlib.Path(checkpoints.checkpoint_dir(workdir), "7")
    positions = step / "data_iter"
    (positions / "process_0-of-1.json").rename(positions / "process_0-of-2.json")
    shutil.copy(positions / "process_0-of-2.json", positions / "process_1-of-2.json")
    config = _config(testdata, 2, 1, 1, 2)
    it = iter(pipeline.train_dataset(config.data, 30522, 8, seed=0))
    manager = checkpoints.make_manager(workdir)
    with pytest.raises(cli.UserError) as error:
        checkpoints.restore_latest(manager, pretrain.make_setup(config).abstract_state, it)
    manager.close()
    message = str(error.value)
    assert "with 1 process(es): 2 saved it" in message and "Rerun with 2 processes" in message
    assert f"--config.train.init_checkpoint={workdir} " in message
    assert "damaged" not in message and "optimizer (" not in message
    assert saved_steps(workdir) == [7]


# --- Where a run's first state comes from ----------------------------------------------------


@pytest.mark.parametrize("where", ["local", "bucket"])
def test_one_rule_tells_the_kinds_of_directory_apart(where, tmp_path, request):
    """checkpoints.model_dir_kind, behind pretrained.load(), export, and pre-training's
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
        name: checkpoints.model_dir_kind(storage.join(root, name))
        for name in layouts
        if name != "neither"
    }
    assert kinds == {
        "workdir": checkpoints.WORKDIR,
        "both": checkpoints.WORKDIR,
        "hf": checkpoints.HF_DIR,
        "tf": checkpoints.HF_DIR,
    }
    with pytest.raises(cli.UserError, match=r"has no config.json .* and no checkpoints/"):
        checkpoints.model_dir_kind(storage.join(root, "neither"))
    with pytest.raises(cli.UserError, match="is not a directory"):
        checkpoints.model_dir_kind(storage.join(root, "neither", "vocab.txt"))
    with pytest.raises(cli.UserError, match="no pre-trained model given"):
        checkpoints.model_dir_kind("")


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
        checkpoints.initial_state(bigger.train, setup, lambda: {})
    same = _tiny(hidden_dropout_prob=0.2)
    same.train.init_checkpoint = workdir
    setup = pretrain.make_setup(same)
    state = checkpoints.initial_state(same.train, setup, lambda: {})
    assert jax.tree.map(np.shape, state["params"]) == jax.tree.map(
        np.shape, setup.abstract_state["params"]
    )
    assert "other model settings: ['hidden_dropout_prob']" in capsys.readouterr().out
