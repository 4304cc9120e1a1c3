"""Orbax checkpoints of a training run: what a step directory holds, and how it comes back.

`<workdir>/checkpoints/<step>/` holds four items, so that each reader loads only what it needs:
  params     the model parameters (a pure dict, as nnx.to_pure_dict gives), float32
  train      {'opt_state', 'step', 'rng'}: the rest of the train state
  data_iter  the Grain iterator position, one JSON file per process
  config     the run's ml_collections config, as JSON

Saves are asynchronous: `save` copies the arrays to host memory before it returns (so the train
step may donate and overwrite them) and writes them in a background thread. Restoring passes
abstract arrays that carry the *current* mesh's shardings, so a run can resume on a different
mesh shape or device count than it was saved from.
"""
import json
import os
from typing import Any

import grain
import jax
import ml_collections
import orbax.checkpoint as ocp
from flax import nnx

PARAMS, TRAIN, DATA_ITER, CONFIG = "params", "train", "data_iter", "config"


def checkpoint_dir(workdir: str) -> str:
    return os.path.join(os.path.abspath(workdir), "checkpoints")


def make_manager(workdir: str, max_to_keep: int = 3, async_save: bool = True,
                 read_only: bool = False) -> ocp.CheckpointManager:
    """A manager over `<workdir>/checkpoints` that keeps the last `max_to_keep` checkpoints."""
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep if max_to_keep > 0 else None,
        enable_async_checkpointing=async_save,
        read_only=read_only,
        create=not read_only,
    )
    handlers = {
        PARAMS: ocp.StandardCheckpointHandler(),
        TRAIN: ocp.StandardCheckpointHandler(),
        DATA_ITER: grain.checkpoint.CheckpointHandler(),
        CONFIG: ocp.JsonCheckpointHandler(),
    }
    return ocp.CheckpointManager(checkpoint_dir(workdir), options=options, item_handlers=handlers)


def save(manager: ocp.CheckpointManager, step: int, state: dict, data_iter: Any,
         config: ml_collections.ConfigDict) -> None:
    """Saves `state` ({'params', 'opt_state', 'step', 'rng'}) as checkpoint `step`, now.

    The caller decides when (train.py: every checkpoint.every_steps, at the end, on SIGTERM);
    Orbax's own interval logic would also save the first step of every run, which costs a save
    for nothing on each resume. `data_iter` is the Grain iterator positioned just after the last
    batch the step consumed.
    """
    train = {k: v for k, v in state.items() if k != "params"}
    manager.save(step, force=True, args=ocp.args.Composite(**{
        PARAMS: ocp.args.StandardSave(state["params"]),
        TRAIN: ocp.args.StandardSave(train),
        DATA_ITER: grain.checkpoint.CheckpointSave(data_iter),
        CONFIG: ocp.args.JsonSave(json.loads(config.to_json_best_effort())),
    }))


def restore(manager: ocp.CheckpointManager, step: int, abstract_state: dict, data_iter: Any = None) -> dict:
    """Restores the train state onto the shardings in `abstract_state`; repositions `data_iter`
    (a Grain iterator) unless it is None.

    `abstract_state` mirrors the state with jax.ShapeDtypeStruct leaves that carry shardings.
    """
    train = {k: v for k, v in abstract_state.items() if k != "params"}
    items = {PARAMS: ocp.args.StandardRestore(abstract_state["params"]), TRAIN: ocp.args.StandardRestore(train)}
    if data_iter is not None:
        items[DATA_ITER] = grain.checkpoint.CheckpointRestore(data_iter)
    try:
        out = manager.restore(step, args=ocp.args.Composite(**items))
    except (ValueError, KeyError) as e:
        raise ValueError(
            f"cannot resume from {manager.directory}/{step}: it does not match this run's model or "
            f"optimizer ({e}). Resume with the config it was written with (its config/ item), or "
            "use a new --workdir") from e
    return {"params": out[PARAMS], **out[TRAIN]}


def saved_steps(workdir: str) -> list[int]:
    """Steps of the checkpoints in `workdir`, oldest first ([] if none)."""
    if not os.path.isdir(checkpoint_dir(workdir)):
        return []
    manager = make_manager(workdir, read_only=True)
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def load_config(workdir: str, step: int | None = None) -> tuple[ml_collections.ConfigDict, int]:
    """(the config saved with a checkpoint, its step); the latest step by default."""
    manager = make_manager(workdir, read_only=True)
    try:
        step = _pick_step(manager, workdir, step)
        saved = manager.restore(step, args=ocp.args.Composite(**{CONFIG: ocp.args.JsonRestore()}))
    finally:
        manager.close()
    return ml_collections.ConfigDict(saved[CONFIG]), step


def _pick_step(manager: ocp.CheckpointManager, workdir: str, step: int | None) -> int:
    steps = manager.all_steps()
    if not steps:
        raise FileNotFoundError(f"no checkpoints under {checkpoint_dir(workdir)}; train there first")
    if step is None:
        return max(steps)
    if step not in steps:
        raise ValueError(f"no checkpoint at step {step} in {checkpoint_dir(workdir)}; there are {sorted(steps)}")
    return step


def restore_params(workdir: str, step: int | None = None,
                   shardings: Any = None) -> tuple[dict, ml_collections.ConfigDict]:
    """(parameters, config) of a run's checkpoint: the latest one unless `step` is given.

    The parameters come back as the pure dict of nnx.to_pure_dict(nnx.state(model, nnx.Param));
    `nnx.update(model, params)` or `nnx.merge(graphdef, params)` puts them into a model built
    from `BertConfig.from_config_dict(config.model)`. They land on the first local device, or
    on `shardings` (a matching pytree of shardings, e.g. a new mesh's).
    """
    from bert_jax import model as model_lib  # the model defines the parameter tree

    config, step = load_config(workdir, step)
    bert_config = model_lib.BertConfig.from_config_dict(config.model)
    abstract = nnx.to_pure_dict(nnx.state(
        nnx.eval_shape(lambda: model_lib.BertForPreTraining(bert_config, rngs=nnx.Rngs(0))), nnx.Param))
    if shardings is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: device, abstract)
    target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, shardings)
    return restore_saved_params(workdir, target, step)[0], config


def restore_saved_params(workdir: str, abstract_params: Any, step: int | None = None) -> tuple[Any, int]:
    """(the `params` item of checkpoint `step` (default: the latest), its step), restored onto
    `abstract_params`: jax.ShapeDtypeStruct leaves carrying the shardings to place them on.

    Any run's parameters: pre-training's BertForPreTraining (restore_params builds the target for
    it) or a fine-tuning run's trainable parameters.
    """
    manager = make_manager(workdir, read_only=True)
    try:
        step = _pick_step(manager, workdir, step)
        out = manager.restore(step, args=ocp.args.Composite(**{PARAMS: ocp.args.StandardRestore(abstract_params)}))
    finally:
        manager.close()
    return out[PARAMS], step
