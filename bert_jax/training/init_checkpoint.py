"""Where a new run's first state comes from: train.init_checkpoint (and fine-tuning's --init)
names a training workdir of ours or a Hugging Face directory (`model_dir_kind`: the one rule
telling them apart); `initial_state` starts a pre-training run from it (phase 1's whole state, or
another run's parameters) or afresh. docs/training.md, "The paper recipe, phase 1 then phase 2";
docs/model.md, "Import a public BERT".
"""

import functools
from collections.abc import Callable

import jax
import ml_collections
import numpy as np

from bert_jax import cli, storage
from bert_jax.hf import files as hf_files
from bert_jax.model import encoder
from bert_jax.training import checkpoints

WORKDIR = "workdir"  # a training run of ours: it has checkpoints/
HF_DIR = "hf"  # a Hugging Face BERT directory (config.json) or Google's original (bert_config.json)


def model_dir_kind(path: str) -> str:
    """WORKDIR or HF_DIR: the one rule for what kind of directory a pre-trained model's path is
    (local or in a bucket). A directory with checkpoints/ is a workdir (whatever else it holds),
    one with config.json or bert_config.json a Hugging Face directory; anything else, an export
    cut short in a bucket included (config.json is published last), is refused by name."""
    if not path:
        raise cli.UserError(
            "no pre-trained model given: pass a Hugging Face BERT directory or a training workdir"
        )
    if not storage.isdir(path):
        raise cli.UserError(
            f"{path!r} is not a directory: pass a Hugging Face BERT directory (config.json and "
            "weights) or a training workdir (it has checkpoints/)"
        )
    if checkpoints.is_workdir(path):
        return WORKDIR
    if any(storage.isfile(storage.join(path, name)) for name in hf_files.CONFIG_FILES):
        return HF_DIR
    raise hf_files.CheckpointError(
        f"{path!r} has no config.json (Hugging Face; Google's original BERT has bert_config.json) "
        "and no checkpoints/ (a training workdir): not a model directory, or an export to it was "
        "cut short (config.json is published last); rerun the export"
    )


def _check_same_parameters(path: str, saved_model: ml_collections.ConfigDict, setup) -> None:
    """Refuses a train.init_checkpoint workdir whose model has other parameters (names or shapes)
    than this run's, before restoring (the restore would place them as they are)."""
    saved = encoder.BertConfig.from_config_dict(saved_model)
    theirs = checkpoints.param_tree(saved)
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
    """A new run's state (config.train `t`, a train_state.Setup): with init_optimizer_state, the
    state of the run in the workdir train.init_checkpoint (phase 1); else `fresh()`, its
    parameters optionally from train.init_checkpoint (another run's workdir or a Hugging Face
    directory: model_dir_kind), placed on the setup's mesh."""
    say = functools.partial(print, flush=True) if jax.process_index() == 0 else lambda *a: None
    if t.init_optimizer_state:  # config_check: init_checkpoint is a workdir
        source = checkpoints.make_manager(t.init_checkpoint, read_only=True)
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
            # The data position stays fresh: phase 2 reads other records. The step (and with it the
            # learning rate) continues: phase 2's first step is step `latest`, as the next step of
            # phase 1 would have been.
            return checkpoints.restore(source, latest, setup.abstract_state)
        finally:
            source.close()
    state = fresh()
    if not t.init_checkpoint:
        return state
    path = t.init_checkpoint
    if model_dir_kind(path) == WORKDIR:
        config, step = checkpoints.load_config(path)
        _check_same_parameters(path, config.model, setup)
        checkpoints.check_kind(config, path, finetuning=False)
        params = checkpoints.restore_saved_params(path, setup.abstract_state["params"], step)
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
