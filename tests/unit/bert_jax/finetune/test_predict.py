"""Prediction from a fine-tuned workdir on a machine other than the one that trained it."""

import itertools
import math

import jax
import pytest

from bert_jax.finetune import predict, train
from bert_jax.model import sharding
from configs.finetune import base
from support.finetune_data import make_config, sst2_file


@pytest.mark.parametrize("here", [1, 2, 3])
def test_a_run_trained_on_a_larger_mesh_predicts_the_same_on_fewer_devices(
    here, tiny_hf, tmp_path, monkeypatch, capsys
):
    """Fine-tuned on a data 1 x fsdp 2 x tensor 2 mesh of 4 devices, then predicted where fewer
    devices exist: predict mode has no --config flags, and it stopped with "set
    config.mesh.data=-1". Now it predicts data-parallel on the devices there are, with a warning,
    and writes what the training mesh writes."""
    test = sst2_file(tmp_path / "test.tsv", 24, 1)
    config = make_config(format="glue", layout="sst2", train_file=sst2_file(tmp_path / "t", 32, 0))
    config.train.num_epochs, config.eval.at_start, config.eval.batch_size = 1.0, False, 12
    config.mesh.num_devices, config.mesh.fsdp, config.mesh.tensor = 4, 2, 2
    workdir = str(tmp_path / "work")
    train.finetune(config, workdir, tiny_hf)
    want, _ = predict.predict_from_workdir(workdir, test, str(tmp_path / "on4.tsv"))
    assert "warning" not in capsys.readouterr().err  # 8 devices: the saved mesh fits

    devices = jax.devices()
    monkeypatch.setattr(jax, "devices", lambda *a, **k: devices[:here])
    got, _ = predict.predict_from_workdir(workdir, test, str(tmp_path / "here.tsv"))
    assert f"does not fit the {here} devices here" in capsys.readouterr().err
    assert open(got).read() == open(want).read()


@pytest.mark.parametrize("process_count", [1, 2, 4])
def test_the_prediction_mesh_fits_the_machine_or_is_the_training_one(process_count):
    """Every training mesh of up to 8 devices (num_devices set or not) against every machine of
    1-8 devices per process: the mesh predict mode builds exists there and gives each process
    rows of its own; where the training mesh already does, it is kept as it was."""
    rules = base.get_config().mesh.rules
    shapes = [
        (d, f, t) for d in (1, 2, 4, 8) for f in (1, 2, 4) for t in (1, 2, 4) if d * f * t <= 8
    ]
    for (d, f, t), limit, here in itertools.product(shapes, (0, 1), range(1, 9)):
        mesh = base.get_config().mesh
        mesh.data, mesh.fsdp, mesh.tensor = d, f, t
        mesh.num_devices = d * f * t if limit else 0
        devices = here * process_count
        before = dict(mesh)
        predict.fit_mesh(mesh, devices, process_count)
        sizes = sharding.mesh_shape(mesh.data, mesh.fsdp, mesh.tensor, mesh.num_devices or devices)
        axes = sharding.data_parallel_axes(dict(zip(sharding.MESH_AXES, sizes)), rules)
        assert math.prod(axes.values()) % process_count == 0, (before, devices)
        fits = d * f * t <= devices if limit else d * f * t == devices
        kept = fits and (d * f) % process_count == 0 and not (limit and process_count > 1)
        assert (dict(mesh) == before) == kept, (before, devices)
