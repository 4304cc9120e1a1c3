"""Inference: model outputs for a dataset, evaluation, prediction files; `predict_from_workdir`
is the prediction command's work (docs/finetuning.md, "Prediction").
"""

import copy
import dataclasses
import functools
import logging
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import cli, storage
from bert_jax.data.contract import features as F
from bert_jax.data.input import packing
from bert_jax.finetune import packed, runs, tasks
from bert_jax.model import sharding
from bert_jax.training import checkpoints, config_check, train_state

PREDICTIONS_DIR = "predictions"
_EXTENSIONS = {"glue": ".tsv", "conll": ".txt", "squad": ".json"}


def jit_infer(setup: train_state.Setup):
    """(params, frozen, inputs) -> model outputs, replicated on every device."""
    return jax.jit(
        functools.partial(runs.forward, setup.graphdef),
        in_shardings=(setup.param_shardings, setup.frozen_shardings, setup.batch_sharding),
        out_shardings=NamedSharding(setup.mesh, P()),
    )


@dataclasses.dataclass
class Inference:
    """A run's inference over its encoded datasets; the trainable parameters come per call."""

    run: runs.Run
    setup: train_state.Setup
    frozen: Any

    def __post_init__(self):
        self.infer_fn = jit_infer(self.setup)

    def outputs(self, params, ds: tasks.Dataset, between_batches=lambda: None):
        """Outputs for every row of `ds`, in order, on every process, laid out as unpacked;
        `between_batches()` (the loop's signal poll) runs after each batch."""
        if not packed.trains_packed(self.run.config, self.setup.kind):
            return self._infer(params, ds.arrays, between_batches)
        p = packed.pack_for_inference(ds.arrays)
        outputs = self._infer(params, p.arrays, between_batches)
        return packed.unpack_outputs(self.setup.kind, p, outputs, ds.arrays[F.INPUT_IDS].shape[1])

    def _infer(self, params, arrays: dict, between_batches: Callable[[], None]):
        setup, batch_size = self.setup, self.run.config.eval.batch_size
        n = len(arrays[F.INPUT_IDS])
        procs, index = jax.process_count(), jax.process_index()
        if batch_size % (setup.data_parallel() * procs):
            raise cli.UserError(
                f"eval.batch_size={batch_size} must be divisible by the {setup.data_parallel()} "
                f"data-parallel devices and the {procs} processes"
            )
        local = batch_size // procs
        outs = []
        with setup.activate():
            for start in range(0, n, batch_size):
                # Process p owns rows [p*local, (p+1)*local); rows past the end repeat row 0.
                rows = np.arange(start + index * local, start + (index + 1) * local)
                rows = np.where(rows < n, rows, 0)
                inputs = [k for k in (*runs.INPUTS, *packing.MODEL_INPUTS) if k in arrays]
                batch = sharding.host_to_global(
                    {k: arrays[k][rows] for k in inputs}, setup.batch_sharding
                )
                outs.append(jax.device_get(self.infer_fn(params, self.frozen, batch)))
                between_batches()
        return jax.tree.map(lambda *xs: np.concatenate(xs)[:n], *outs)

    def evaluate(self, params, eval_sets: dict[str, tasks.Dataset], between_batches):
        """{file name: metrics} over the encoded eval files."""
        metrics = self.run.task.metrics
        return {
            name: metrics(ds, self.outputs(params, ds, between_batches), self.run.labels)
            for name, ds in eval_sets.items()
        }

    def write_predictions(
        self, params, ds: tasks.Dataset, output: str, between_batches=lambda: None
    ) -> dict[str, float] | None:
        """Predictions for `ds` into `output` (none if `between_batches` raises) -> its metrics."""
        outputs = self.outputs(params, ds, between_batches)
        if jax.process_index() == 0:
            self.run.task.write(output, ds, outputs, self.run.labels)
        logging.info("wrote predictions to %s", output)
        return self.run.task.metrics(ds, outputs, self.run.labels) if ds.has_labels else None


def prediction_path(workdir: str, data_format: str, test_file: str) -> str:
    name = os.path.splitext(os.path.basename(test_file))[0]
    return storage.join(workdir, PREDICTIONS_DIR, name + _EXTENSIONS[data_format])


def fill_missing(saved: ml_collections.ConfigDict, defaults: ml_collections.ConfigDict) -> None:
    """Adds the fields a saved config lacks (saved before they existed) at `defaults`' value."""
    with saved.unlocked():
        for key, value in defaults.items():
            if key not in saved:
                saved[key] = copy.deepcopy(value)
            elif isinstance(value, ml_collections.ConfigDict) and isinstance(
                saved[key], ml_collections.ConfigDict
            ):
                fill_missing(saved[key], value)


def fit_mesh(mesh: ml_collections.ConfigDict, num_devices: int, process_count: int) -> None:
    """The training run's mesh where it fits this machine's devices, else all of them for data
    parallelism (outputs do not depend on the mesh; predict mode has no flag to set it)."""
    try:
        sizes = sharding.mesh_shape(
            mesh.data, mesh.fsdp, mesh.tensor, mesh.num_devices or num_devices
        )
        fits = mesh.num_devices <= num_devices and not (mesh.num_devices and process_count > 1)
        # Each process feeds its own rows: the batch must split over the processes here too.
        axes = sharding.data_parallel_axes(dict(zip(sharding.MESH_AXES, sizes)), mesh.rules)
        fits = fits and math.prod(axes.values()) % process_count == 0
    except cli.UserError:
        fits = False
    if not fits:
        cli.warn(
            f"the run trained on mesh data={mesh.data} fsdp={mesh.fsdp} tensor={mesh.tensor}"
            f"{f' of {mesh.num_devices} devices' if mesh.num_devices else ''}, which does not "
            f"fit the {num_devices} devices here: predicting data-parallel on all of them"
        )
        mesh.data, mesh.fsdp, mesh.tensor, mesh.num_devices = -1, 1, 1, 0


def predict_from_workdir(
    workdir: str, test_file: str, output: str = "", init: str = "", overrides: dict | None = None
) -> tuple[str, dict[str, float] | None]:
    """-> (output path, metrics or None). `init` replaces the saved --init (a moved directory);
    `overrides`: {dotted config field: value}."""
    config, _ = checkpoints.load_config(workdir, problems=config_check.range_problems)
    checkpoints.check_kind(config, workdir, finetuning=True)
    from configs.finetune import base  # the fields' defaults have one home: the config file

    fill_missing(config, base.get_config())
    with config.unlocked():
        config.update_from_flattened_dict(overrides or {})
    fit_mesh(config.mesh, len(jax.devices()), jax.process_count())
    run = runs.prepare(config, init or None, with_train=False)
    setup, _trainable, frozen = runs.make_setup(run.config, run.model, total_steps=1)
    params, step = checkpoints.restore_saved_params(workdir, setup.abstract_state["params"])
    output = output or prediction_path(workdir, run.config.data.format, test_file)
    ds = runs.encode_file(run, test_file)
    figures = Inference(run, setup, frozen).write_predictions(params, ds, output)
    logging.info("predicted %s with step %d of %s", test_file, step, workdir)
    return output, figures
