"""Prediction from a fine-tuned workdir on a machine other than the one that trained it."""

import jax
import pytest

from bert_jax.finetune import predict, train
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
