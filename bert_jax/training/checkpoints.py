"""Orbax checkpoints of a training run: saved, resumed, read back by export, embed, predict and
--init (docs/training.md, "The workdir"; damaged steps: docs/faults.md); and where a new run's
first state comes from (`initial_state`, `model_dir_kind`).
"""

import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import grain
import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from bert_jax import cli, storage
from bert_jax.hf import files as hf_files
from bert_jax.model import encoder
from bert_jax.training import checksums

PARAMS, TRAIN, DATA_ITER, CONFIG, CHECKSUMS = "params", "train", "data_iter", "config", "checksums"


class DamagedCheckpoint(cli.UserError):
    """A step whose arrays differ from what was saved, or whose parameters are not finite."""


def checkpoint_dir(workdir: str) -> str:
    if storage.is_url(workdir):  # a bucket (gs://...): Orbax writes there directly
        return workdir.rstrip("/") + "/checkpoints"
    return os.path.join(os.path.abspath(workdir), "checkpoints")


def is_workdir(path: str) -> bool:
    return storage.isdir(checkpoint_dir(path))


def _bound_tensorstore_retries() -> None:
    """Orbax has no option for TensorStore's GCS retries but copies these dicts: bounded, a
    bucket that stays away fails a save within gcsfs' budget instead of ~15 minutes."""
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils

    for context in (ts_utils._BASE_TS_CONTEXT, ts_utils._DEFAULT_OCDBT_TS_CONTEXT):
        context.setdefault("gcs_request_retries", storage.tensorstore_retries())


def make_manager(
    workdir: str, max_to_keep: int = 3, async_save: bool = True, read_only: bool = False
) -> ocp.CheckpointManager:
    if storage.is_url(workdir):
        if problem := storage.checkpoint_problem(workdir):  # s3://, a '#': see there
            raise storage.StorageError(problem)
        _bound_tensorstore_retries()
    options = ocp.CheckpointManagerOptions(
        # Read-only: the values Orbax would force anyway (it warns about each one it changes).
        max_to_keep=max_to_keep if max_to_keep > 0 and not read_only else None,
        save_interval_steps=0 if read_only else 1,
        enable_async_checkpointing=async_save,
        read_only=read_only,
        create=not read_only,
        # Leftovers of a save that was killed midway; never a restorable step.
        cleanup_tmp_directories=not read_only,
        # A bucket has no rename (s3fs copies: a killed save could look finished): a step is
        # written in place and finished by its commit marker.
        atomicity_options=ocp.options.AtomicityOptions(mode=ocp.options.AtomicityMode.COMMIT_FILE)
        if storage.is_url(workdir)
        else None,
    )
    handlers = {
        PARAMS: ocp.StandardCheckpointHandler(),
        TRAIN: ocp.StandardCheckpointHandler(),
        DATA_ITER: grain.checkpoint.CheckpointHandler(),
        CONFIG: ocp.JsonCheckpointHandler(),
        CHECKSUMS: ocp.JsonCheckpointHandler(),
    }
    directory = checkpoint_dir(workdir)
    # A bucket: the steps another process saved since this one last listed them count too.
    storage.forget_listings(directory)
    with storage.checkpoint_errors(directory):
        return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


def save(
    manager: ocp.CheckpointManager,
    step: int,
    state: dict,
    data_iter: Any,
    config: ml_collections.ConfigDict,
) -> None:
    """Saves `step` now; the arrays reach the host before it returns: the step may donate them."""
    train = {k: v for k, v in state.items() if k != "params"}
    fingerprints = checksums.record({PARAMS: state["params"], TRAIN: train})
    where = str(manager.directory)
    with storage.checkpoint_errors(where), cli.disk_full_is_oserror(where):
        manager.save(
            step,
            force=True,
            args=ocp.args.Composite(
                **{
                    PARAMS: ocp.args.StandardSave(state["params"]),
                    TRAIN: ocp.args.StandardSave(train),
                    DATA_ITER: grain.checkpoint.CheckpointSave(data_iter),
                    CONFIG: ocp.args.JsonSave(json.loads(config.to_json_best_effort())),
                    CHECKSUMS: ocp.args.JsonSave(fingerprints),
                }
            ),
        )


def finish(manager: ocp.CheckpointManager) -> None:
    where = str(manager.directory)
    with storage.checkpoint_errors(where), cli.disk_full_is_oserror(where):
        manager.wait_until_finished()
    manager.close()


# What Orbax's background threads say after a write failed, which the main thread reports once.
_AFTERMATH = ("Event loop is closed", "cannot schedule new futures after shutdown")
# How Orbax's log lines quote a refused request (gcsfs' 403 and 401, TensorStore's statuses).
_REFUSED = ("Forbidden: ", "Unauthorized: ", "PERMISSION_DENIED: ", "UNAUTHENTICATED: ")


def _drop_orbax_noise(record: logging.LogRecord) -> bool:
    """Drops logged tracebacks of errors the main thread reports in one line, and noise."""
    if not ("orbax" in record.pathname or record.name == "asyncio"):
        return True
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None and storage.looks_like_storage(exc):
        return False  # the main thread reports it in one line (storage.checkpoint_errors)
    text = " ".join([record.getMessage(), *map(str, cli.causes(exc))])
    noise = (*_REFUSED, *cli.NO_SPACE, *_AFTERMATH, "Given directory is read only")
    return not any(t in text for t in noise)


for _name in ("absl", "asyncio"):
    logging.getLogger(_name).addFilter(_drop_orbax_noise)


def _drop_closed_loop_noise(unraisable, previous=sys.unraisablehook) -> None:
    """Drops the unraisable aftermath of a failed save or restore, which buried its one line."""
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) in _AFTERMATH:
        return
    code = getattr(unraisable.object, "cr_code", None)  # a coroutine's
    in_orbax = code is not None and "orbax" in code.co_filename and error is not None
    if not (in_orbax and isinstance(error.__cause__, GeneratorExit)):
        previous(unraisable)


sys.unraisablehook = _drop_closed_loop_noise


# Train-state counters newer than some checkpoints: restored as 0 from a checkpoint without them.
COUNTERS_ADDED_LATER = ("nonfinite_steps",)


def restore(
    manager: ocp.CheckpointManager, step: int, abstract_state: dict, data_iter: Any = None
) -> dict:
    """Checkpoint `step`'s train state, verified, on `abstract_state`'s shardings."""
    state = _restore_items(manager, step, abstract_state, data_iter)
    verify(manager, step, state)
    return state


def _restore_items(
    manager: ocp.CheckpointManager, step: int, abstract_state: dict, data_iter: Any
) -> dict:
    train = {k: v for k, v in abstract_state.items() if k != "params"}
    try:
        with storage.checkpoint_errors(str(manager.directory)):
            saved = manager.item_metadata(step)[TRAIN]
            missing = [
                k
                for k in COUNTERS_ADDED_LATER
                if k in train and saved is not None and k not in saved
            ]
            items = {
                PARAMS: ocp.args.StandardRestore(abstract_state["params"]),
                TRAIN: ocp.args.StandardRestore(
                    {k: v for k, v in train.items() if k not in missing}
                ),
            }
            if data_iter is not None:
                items[DATA_ITER] = grain.checkpoint.CheckpointRestore(data_iter)
            out = manager.restore(step, args=ocp.args.Composite(**items))
    except storage.StorageError:
        raise  # not damage: the bucket refused or stayed away (never moved aside for it)
    except Exception as e:  # TensorStore raises plain Exceptions for damaged files
        raise cli.UserError(
            f"cannot resume from {manager.directory}/{step}: it is damaged, or it does not match "
            f"this run's model or optimizer ({_root_cause(e)}). Resume with the config it was "
            "written with (its config/ item), or use a new --workdir"
        ) from e
    zeros = {
        k: jax.device_put(np.zeros(train[k].shape, train[k].dtype), train[k].sharding)
        for k in missing
    }
    return {"params": out[PARAMS], **out[TRAIN], **zeros}


def _root_cause(error: BaseException) -> str:
    """'Type: text' of the innermost cause: TensorStore's finding, not Orbax's wrapper."""
    cause = cli.causes(error, explicit=True)[-1]
    # A request URL names the object in a bucket as its path.
    text = storage.readable(str(cause)).split(" [tensorstore_spec=")[0]
    return f"{type(cause).__name__}: {text[:500]}"


def verify(manager: ocp.CheckpointManager, step: int, state: dict) -> None:
    """Refuses `state` (or {'params'} alone) unless finite and as `step`'s checksums say."""
    saved = None  # a checkpoint written before checksums existed
    if (manager.directory / str(step) / CHECKSUMS).exists():
        saved = _read_item(manager, step, CHECKSUMS, ocp.args.JsonRestore())  # garbled: damage
    problems = checksums.problems(saved, PARAMS, state["params"])
    train = {k: v for k, v in state.items() if k != "params"}
    if train:
        problems += checksums.problems(saved, TRAIN, train)
    if problems:
        raise DamagedCheckpoint(
            f"checkpoint {manager.directory}/{step} is damaged: " + "; ".join(problems)
        )


CORRUPT_SUFFIX = ".corrupt"
# Written last into a step in a bucket: it says the step is finished (AtomicityMode.COMMIT_FILE).
COMMIT_MARKER = "commit_success.txt"


def restore_latest(
    manager: ocp.CheckpointManager,
    abstract_state: dict,
    data_iter: Any = None,
    model_config: dict | None = None,
) -> tuple[int, dict] | None:
    """(step, state) of the newest step that restores, or None; newer ones are moved aside. If
    none restores (an older step cannot fix a config mismatch) the error names every failure."""
    steps = sorted(manager.all_steps(), reverse=True)
    if steps and model_config is not None:
        check_same_model(manager, steps[0], abstract_state["params"], model_config)
    if steps and data_iter is not None:
        check_same_processes(manager, steps[0])
    failures: list[tuple[int, Exception]] = []
    for step in steps:
        restored = None
        try:
            restored = _restore_items(manager, step, abstract_state, data_iter)
        except storage.StorageError:
            raise  # the bucket's state, not the step's: an older step would not fix it
        except ValueError as e:
            failures.append((step, e))
        # Each process reads its own shards: all fall back together or none does.
        if not _all_processes(restored is not None):
            if restored is not None:
                failures.append((step, RuntimeError("another process could not read this step")))
            continue
        try:  # the same verdict on every process: the fingerprints are combined across them
            verify(manager, step, restored)
        except DamagedCheckpoint as e:
            failures.append((step, e))
            continue
        if failures:
            _move_aside(manager, failures, step)
        return step, restored
    if failures:
        raise cli.UserError(
            f"no checkpoint under {manager.directory} can be restored:\n"
            + "\n".join(f"  step {s}: {e}" for s, e in failures)
        )
    return None


def _shapes(tree) -> dict[str, tuple]:
    """{'bert/layers/0/...': shape}; keys as text, as Orbax's metadata names a layer '0'."""
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    return {
        jax.tree_util.keystr(path, simple=True, separator="/"): tuple(leaf.shape)
        for path, leaf in leaves
    }


def check_same_processes(manager: ocp.CheckpointManager, step: int) -> None:
    """Refuses a step saved by another process count (docs/scaling.md, "Limits"), not as damage."""
    folder = manager.directory / str(step) / DATA_ITER
    mine = f"process_{jax.process_index()}-of-{jax.process_count()}.json"
    with storage.checkpoint_errors(str(manager.directory)):
        if not folder.is_dir() or (folder / mine).exists():
            return
        saved = sorted(p.name for p in folder.iterdir() if p.name.startswith("process_"))
    if not saved:
        return  # no positions at all: damage, which the restore reports
    count = saved[0].removesuffix(".json").split("-of-")[-1]
    workdir = os.path.dirname(str(manager.directory).rstrip("/"))
    raise cli.UserError(
        f"cannot resume from {manager.directory}/{step} with {jax.process_count()} "
        f"process(es): {count} saved it, each with its own data position ({saved[0]}, ...). "
        f"Rerun with {count} processes, or go on in a new --workdir with "
        f"--config.train.init_checkpoint={workdir} --config.train.init_optimizer_state=True "
        "(the data order restarts)"
    )


def check_same_model(
    manager: ocp.CheckpointManager, step: int, abstract_params: Any, model_config: dict
) -> None:
    """Refuses a step whose parameters differ from `abstract_params`, naming config.model's."""
    try:
        saved = _shapes(manager.item_metadata(step)[PARAMS])
    except Exception:  # damaged metadata: restore_latest's fallback handles the step
        return
    ours = _shapes(abstract_params)
    if not saved or saved == ours:
        return
    try:
        theirs = dict(_read_item(manager, step, CONFIG, ocp.args.JsonRestore()).get("model", {}))
    except Exception:  # no config to compare (a damaged one included)
        theirs = {}
    fields = [
        f"config.model.{k}={model_config.get(k)!r} (the checkpoint's: {theirs.get(k)!r})"
        for k in sorted(set(theirs) | set(model_config))
        if theirs.get(k) != model_config.get(k)
    ]
    if not fields:  # no saved config to compare: name an array instead
        key = next(k for k in sorted(set(saved) | set(ours)) if saved.get(k) != ours.get(k))
        fields = [f"params/{key} has shape {ours.get(key)} here, {saved.get(key)} there"]
    raise cli.UserError(
        f"cannot resume from {manager.directory}/{step}: this run's model differs from the one "
        f"it saved: {'; '.join(fields)}. Resume with the checkpoint's model config, or train "
        "this model in a new --workdir"
    )


def _all_processes(ok: bool) -> bool:
    if jax.process_count() == 1:
        return ok
    from jax.experimental import multihost_utils

    return bool(multihost_utils.process_allgather(np.int32(ok)).all())


def _move_aside(
    manager: ocp.CheckpointManager, failures: list[tuple[int, Exception]], good: int
) -> None:
    for step, error in failures:
        src = manager.directory / str(step)  # an epath.Path: a local directory or a bucket
        dst = src.parent / (src.name + CORRUPT_SUFFIX)
        n = 1
        while dst.exists():  # damaged twice at the same step: keep both
            dst, n = src.parent / f"{src.name}{CORRUPT_SUFFIX}-{n}", n + 1
        cli.warn(
            f"checkpoint {src} is damaged and was moved to {dst}; resuming from the older step "
            f"{good} instead. The error: {_root_cause(error)}"
        )
        if jax.process_index() == 0:
            if storage.is_url(str(src)):
                # The marker goes first: a move cut short leaves an unfinished step (never
                # restored), not a damaged one that looks whole.
                storage.remove(str(src / COMMIT_MARKER))
            storage.move(str(src), str(dst))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("bert_jax.training.checkpoints.move_aside")
    manager.reload()  # forget the moved steps, so that saving them again is allowed


def load_config(
    workdir: str,
    step: int | None = None,
    problems: Callable[[ml_collections.ConfigDict], list[str]] | None = None,
) -> tuple[ml_collections.ConfigDict, int]:
    """(a step's saved config, the step); any of `problems` (config_check's) is damage."""
    with _step_to_read(workdir, step) as (manager, step):
        # A config item missing, cut short or garbled is damage; a bucket's failure is not.
        saved = _read_item(manager, step, CONFIG, ocp.args.JsonRestore())
        # Out of shape (a hand edit): refused naming the field, not failing where it is used.
        where = f"checkpoint {manager.directory}/{step} is damaged: its config item"
        if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
            raise DamagedCheckpoint(f"{where} is not a config (no model section)")
        config = ml_collections.ConfigDict(saved)
        found = problems(config) if problems else []
        if found:
            raise DamagedCheckpoint(f"{where} is out of shape: {'; '.join(found)}")
        return config, step


@contextlib.contextmanager
def _step_to_read(workdir: str, step: int | None):
    """(a read-only manager, `step` or the latest); damage inside names the other steps."""
    manager = make_manager(workdir, read_only=True)
    try:
        steps = manager.all_steps()
        if not steps:
            raise cli.UserError(
                f"no checkpoints under {checkpoint_dir(workdir)}; train there first"
            )
        if step is None:
            step = max(steps)
        elif step not in steps:
            raise cli.UserError(
                f"no checkpoint at step {step} in {checkpoint_dir(workdir)}; there are "
                f"{sorted(steps)}"
            )
        yield manager, step
    except DamagedCheckpoint as e:
        others = [s for s in sorted(manager.all_steps()) if s != step]
        hint = (
            f"the other saved steps are {others}: pass one (--step={others[-1]} for export "
            "and embed), or move the damaged step aside"
            if others
            else "no other step is saved; train again from an earlier run"
        )
        raise DamagedCheckpoint(f"{e}; it was not used: {hint}") from e
    finally:
        manager.close()


def _read_item(
    manager: ocp.CheckpointManager, step: int, item: str, args, passes=storage.StorageError
):
    """Item `item` of checkpoint `step`; an error that is not a `passes` is damage."""
    try:
        with storage.checkpoint_errors(str(manager.directory)):
            return manager.restore(step, args=ocp.args.Composite(**{item: args}))[item]
    except passes:
        raise
    except Exception as e:  # TensorStore and Orbax raise plain Exceptions for damaged files
        raise DamagedCheckpoint(
            f"checkpoint {manager.directory}/{step} is damaged: its {item} item does not read "
            f"({_root_cause(e)})"
        ) from e


def is_finetuning(config: ml_collections.ConfigDict) -> bool:
    """Whether a saved config is bert_jax.finetune's (`init`, `data.train_file`)."""
    return "init" in config and "train_file" in (config.get("data") or {})


def check_kind(config: ml_collections.ConfigDict, workdir: str, finetuning: bool) -> None:
    """Refuses a workdir of the other trainer by name."""
    if is_finetuning(config) == finetuning:
        return
    if finetuning:
        raise cli.UserError(
            f"{workdir!r} holds a pre-training run, not a fine-tuning one: predict with the "
            "workdir python -m bert_jax.finetune trained (or export this run and fine-tune it "
            "with --init)"
        )
    raise cli.UserError(
        f"{workdir!r} holds a fine-tuning run (python -m bert_jax.finetune's), not a "
        f"pre-training one: pass its export, {storage.join(workdir, 'export')} (a Hugging Face "
        "directory, written when config.export is on), or the pre-training workdir"
    )


def restore_params(
    workdir: str, step: int | None = None, config: ml_collections.ConfigDict | None = None
) -> tuple[dict, ml_collections.ConfigDict]:
    """(pure-dict parameters, config) of a run's checkpoint, on the first local device."""
    if config is None:
        config, step = load_config(workdir, step)
        check_kind(config, workdir, finetuning=False)
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
        param_tree(encoder.BertConfig.from_config_dict(config.model)),
    )
    return restore_saved_params(workdir, target, step)[0], config


def param_tree(bert_config) -> dict:
    """The abstract pure-dict parameters of the pre-training model of `bert_config`."""
    model = nnx.eval_shape(lambda: encoder.BertForPreTraining(bert_config, rngs=nnx.Rngs(0)))
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def restore_saved_params(
    workdir: str, abstract_params: Any, step: int | None = None
) -> tuple[Any, int]:
    """(any run's `params` item of `step` or the latest on `abstract_params`, the step)."""
    with _step_to_read(workdir, step) as (manager, step):
        # A UserError (a bucket that stayed away) says what to do; a failed read is damage.
        params = _read_item(
            manager, step, PARAMS, ocp.args.StandardRestore(abstract_params), cli.UserError
        )
        verify(manager, step, {"params": params})
        return params, step


# --- Where a new run's first state comes from ------------------------------------------------
WORKDIR = "workdir"  # a training run of ours: it has checkpoints/
HF_DIR = "hf"  # a Hugging Face BERT directory (config.json) or Google's original (bert_config.json)


def model_dir_kind(path: str) -> str:
    """WORKDIR or HF_DIR, the one rule: checkpoints/ wins over config.json; else refused."""
    if not path:
        raise cli.UserError(
            "no pre-trained model given: pass a Hugging Face BERT directory or a training workdir"
        )
    if not storage.isdir(path):
        raise cli.UserError(
            f"{path!r} is not a directory: pass a Hugging Face BERT directory (config.json and "
            "weights) or a training workdir (it has checkpoints/)"
        )
    if is_workdir(path):
        return WORKDIR
    if any(storage.isfile(storage.join(path, name)) for name in hf_files.CONFIG_FILES):
        return HF_DIR
    raise hf_files.CheckpointError(
        f"{path!r} has no config.json (Hugging Face; Google's original BERT has bert_config.json) "
        "and no checkpoints/ (a training workdir): not a model directory, or an export to it was "
        "cut short (config.json is published last); rerun the export"
    )


def _check_same_parameters(path: str, saved_model: ml_collections.ConfigDict, setup) -> None:
    """Refuses an init_checkpoint workdir with other parameters, which the restore would take."""
    saved = encoder.BertConfig.from_config_dict(saved_model)
    theirs = param_tree(saved)
    if jax.tree.map(np.shape, theirs) == jax.tree.map(np.shape, setup.abstract_state["params"]):
        return
    fields = [
        f"{f}={getattr(saved, f)!r} (this run: {getattr(setup.model_config, f)!r})"
        for f in sorted(saved_model.keys())
        if getattr(saved, f, None) != getattr(setup.model_config, f, None)
    ]
    raise cli.UserError(
        f"train.init_checkpoint={path!r} holds a model with other parameters than this run's "
        f"config.model: {', '.join(fields) or 'its parameter tree differs'}; start from a run of "
        "the same model, or set config.model as that run had it"
    )


def initial_state(t: ml_collections.ConfigDict, setup, fresh: Callable[[], dict]) -> dict:
    """A new run's state: the whole state of train.init_checkpoint's run with
    init_optimizer_state (phase 1), else `fresh()` with its parameters from there if given."""
    say = functools.partial(print, flush=True) if jax.process_index() == 0 else lambda *a: None
    if t.init_optimizer_state:  # config_check: init_checkpoint is a workdir
        source = make_manager(t.init_checkpoint, read_only=True)
        try:
            latest = source.latest_step()
            if latest is None:
                raise cli.UserError(
                    f"no checkpoints in train.init_checkpoint={t.init_checkpoint!r}"
                )
            if latest >= t.num_train_steps:
                # The loop would end before its first step, with phase 1's parameters as "done".
                raise cli.UserError(
                    f"{t.init_checkpoint} ends at step {latest}, but train.num_train_steps="
                    f"{t.num_train_steps}: with init_optimizer_state the schedule goes on from "
                    f"step {latest}, so num_train_steps counts both phases "
                    "(the paper's phase 2: 900k -> 1M)"
                )
            say(f"parameters, optimizer state and step from {source.directory}/{latest}")
            # The data position stays fresh (phase 2 reads other records); the step and the
            # learning rate go on from phase 1's.
            return restore(source, latest, setup.abstract_state)
        finally:
            source.close()
    state = fresh()
    if not t.init_checkpoint:
        return state
    path = t.init_checkpoint
    if model_dir_kind(path) == WORKDIR:
        config, step = load_config(path)
        _check_same_parameters(path, config.model, setup)
        check_kind(config, path, finetuning=False)
        params = restore_saved_params(path, setup.abstract_state["params"], step)
        state["params"] = params[0]
        changed = sorted(
            k for k, v in config.model.items() if getattr(setup.model_config, k, v) != v
        )
        if changed:  # e.g. dropout or dtype: allowed, worth a line
            say(f"note: {path} was trained with other model settings: {changed}")
    else:
        from bert_jax.hf import bert  # here: the names' mapping is only needed for this

        state["params"], report = bert.load_hf_params(
            storage.local_dir(path), setup.model_config, shardings=setup.param_shardings
        )
        if report.initialized:
            say(f"freshly initialized (not in {path}): {report.initialized}")
    say(f"initial parameters from {path}")
    return state
