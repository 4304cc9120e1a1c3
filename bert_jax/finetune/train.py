"""The fine-tuning run on bert_jax/training's loop: train step, periodic eval, checkpoints (a
rerun resumes), predictions for data.test_file, the export to <workdir>/export.
"""

import functools
import logging

import grain
import jax
import ml_collections
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bert_jax import cli, storage
from bert_jax.finetune import heads, lora, packed, predict, runs, tasks
from bert_jax.hf import publish
from bert_jax.training import checkpoints, faults, loop, optim, train_state

EXPORT_DIR = "export"
# A few whole steps ahead on one thread keep the device fed (Grain's default: 500; docs/testing.md).
READ_AHEAD = grain.ReadOptions(num_threads=1, prefetch_buffer_size=4)


def train_step(state, frozen, batch, lr, *, graphdef, kind, optimizer, pad_id=heads.PAD_ID):
    """One optimizer step on the trainable parameters. Dropout keys are fold_in(rng, step): a
    resumed run draws the same masks. [PAD]'s embedding gets no gradient, as in transformers."""
    step = state["step"]
    rng = jax.random.fold_in(state["rng"], step)

    def loss_fn(params):
        return heads.loss(kind, runs.forward(graphdef, params, frozen, batch, rng), batch)

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    grads = heads.without_pad_gradient(grads, pad_id)
    new_state, grad_norm = train_state.apply_gradients(state, grads, loss, optimizer(lr))
    return new_state, {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": optim.rate(lr, step),
        "nonfinite_steps": new_state["nonfinite_steps"],  # cumulative over the run
    }


def jit_train_step(setup: train_state.Setup, pad_id: int = heads.PAD_ID):
    """(state, frozen, batch, lr) -> (state, metrics), the state donated; `lr`: setup.lr."""
    fn = functools.partial(
        train_step,
        graphdef=setup.graphdef,
        kind=setup.kind,
        optimizer=setup.optimizer,
        pad_id=pad_id,
    )
    replicated = NamedSharding(setup.mesh, P())
    return jax.jit(
        fn,
        in_shardings=(
            setup.state_shardings,
            setup.frozen_shardings,
            setup.batch_sharding,
            replicated,
        ),
        out_shardings=(setup.state_shardings, replicated),
        donate_argnums=(0,),
    )


def _check_outputs(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Where the run's last acts write, checked before it trains, not found in the way after."""
    if config.data.test_file:
        path = predict.prediction_path(workdir, config.data.format, config.data.test_file)
        if storage.isdir(path):
            raise cli.UserError(
                f"{path} is a directory, where the predictions for config.data.test_file go: "
                "move it away"
            )
    if config.get("export"):
        publish.check_target(storage.join(workdir, EXPORT_DIR), heads.EXPORT_FLAG)


@faults.one_run_per_workdir("bert_jax.finetune")
def finetune(config: ml_collections.ConfigDict, workdir: str, init: str | None = None) -> dict:
    """Fine-tunes and evaluates -> {'step', 'trainable', 'total', 'eval', 'eval_at_start', 'train',
    'predictions', 'export', 'stopped'}; a stop other than 'done' (docs/faults.md) skips what
    follows, and one before the first step returns step=None."""
    runs.check_finetuning(config, jax.device_count(), jax.process_count(), init)
    run = runs.prepare(config, init)
    config = run.config
    # Every input file is read (and refused if bad) before the workdir exists or training starts.
    eval_sets = runs.eval_datasets(run)
    test_set = runs.encode_file(run, config.data.test_file) if config.data.test_file else None
    _check_outputs(config, workdir)
    total = runs.num_train_steps(config, len(run.train))
    if config.optim.warmup_steps > total:  # the schedule would name a num_train_steps nobody set
        raise cli.UserError(
            f"config: optim.warmup_steps={config.optim.warmup_steps} is longer than this run "
            f"({total} steps: {len(run.train)} training rows, train.num_epochs="
            f"{config.train.num_epochs}); warm up over part of it, or set optim.warmup_steps=0 "
            "to use optim.warmup_proportion"
        )
    setup, trainable, frozen = runs.make_setup(config, run.model, total)
    counts = {
        "total": lora.count(run.model),
        "trainable": lora.count(run.model, runs.trainable_filter(config)),
    }
    manager = checkpoints.make_manager(
        workdir, config.checkpoint.max_to_keep, config.checkpoint.async_save
    )
    is_primary = jax.process_index() == 0

    def say(text: str) -> None:
        if is_primary:
            print(text, flush=True)

    # One signal handler up to the export: a signal anywhere stops after its step or batch.
    with faults.Preemption(manager) as preemption:
        say(
            f"fine-tuning {counts['trainable']:,} of {counts['total']:,} parameters "
            f"({100 * counts['trainable'] / counts['total']:.2f}%; "
            f"{f'LoRA rank {config.lora.rank:d}' if config.lora.rank else 'full'}) "
            f"for {total} steps on {len(run.train)} training rows, mesh {dict(setup.mesh.shape)}"
        )
        batch, seed = config.train.batch_size, config.train.seed
        procs, index, plan = jax.process_count(), jax.process_index(), None
        if packed.trains_packed(config, setup.kind):
            plan = packed.plan(run.train.arrays, batch, seed, total, procs, setup.data_parallel())
            say(
                f"packed: {plan.examples_per_row:.1f} examples a row on average, "
                f"{plan.rows * procs} rows a step for {batch} examples "
                "(--config.train.packing=false to turn off)"
            )
        batches = packed.train_batches(run.train.arrays, batch, seed, plan, index, procs)
        data_iter = iter(batches.to_iter_dataset(READ_AHEAD))
        resumed = checkpoints.restore_latest(manager, setup.abstract_state, data_iter)
        if resumed is not None:
            saved, _ = checkpoints.load_config(workdir, resumed[0])
            runs.check_same_init(saved, config.init_fingerprint, config.init)
            logging.info("resuming from %s at step %d", manager.directory, resumed[0])
            state = resumed[1]
        else:
            state = runs.initial_state(setup, trainable, config.train.seed)
        del trainable
        step = int(jax.device_get(state["step"]))

        inference = predict.Inference(run, setup, frozen)
        p_train_step = jit_train_step(setup, run.tok.pad_id)
        lr = setup.lr_on_mesh()
        training = loop.Loop(workdir, config, setup, manager, data_iter, step, total)
        primary = tasks.primary_metric(run.task, config.data)

        def run_eval(step: int, state: dict, between_batches) -> dict:
            figures = inference.evaluate(state["params"], eval_sets, between_batches)
            flat = {f"{name}/{k}": v for name, values in figures.items() for k, v in values.items()}
            if not training.log.evaluated(step):  # a rerun's final eval again: logged once
                training.log.write(step, "eval", flat)
            say(
                f"eval  step {step:d}  "
                + "  ".join(
                    f"{name} {metric} {values[metric]:.4f}"
                    for name, values in figures.items()
                    for metric in dict.fromkeys((primary, "macro_f1"))
                    if metric in values
                )
            )
            return figures

        result = {
            "step": step,
            **counts,
            "train": {},
            "eval": {},
            "eval_at_start": {},
            "predictions": None,
            "export": None,
            "stopped": "done",
        }

        if eval_sets and config.eval.at_start and step == 0:
            try:
                result["eval_at_start"] = run_eval(step, state, preemption.between_batches)
            except faults.Abandoned:  # nothing trained yet: nothing to save, a rerun starts over
                training.log.close()
                checkpoints.finish(manager)
                result.update(step=None, stopped=preemption.stopped())
                if result["stopped"] == "preempted":
                    say(
                        "preempted during the eval at start, before the first step: nothing to "
                        "save; rerun the same command to start"
                    )
                return result

        out = training.run(
            state,
            last_step=total,
            train_step=lambda state, batch: p_train_step(state, frozen, batch, lr),
            train_figures=lambda m, t: (
                {**m, "step_time": t, "examples_per_sec": batch / t} if t else m
            ),
            evaluate=(lambda *args: result.update(eval=run_eval(*args))) if eval_sets else None,
            eval_at_last_step=False,  # the final eval follows the loop, unless it stopped early
            preemption=preemption,
        )
        state, step = out.state, out.step  # the state passed in was donated to the steps
        result.update(step=step, train=out.train, stopped=out.stopped)
        if out.stopped != "done":  # saved (the loop said so), or 'nonfinite' (NonfiniteWatch did)
            training.log.close()
            return result
        # The last step is saved: after a signal now, a rerun resumes there and does these again.
        try:
            if eval_sets:
                result["eval"] = run_eval(step, state, preemption.between_batches)
            if test_set is not None:
                output = predict.prediction_path(workdir, config.data.format, config.data.test_file)
                inference.write_predictions(
                    state["params"], test_set, output, preemption.between_batches
                )
                result["predictions"] = output
            preemption.between_batches()  # a signal during the last save, with nothing after it
        except faults.Abandoned:
            result.update(stopped=preemption.stopped(), eval={}, predictions=None)
        training.log.close()
    if result["stopped"] != "done":
        if result["stopped"] == "preempted":
            say(
                f"preempted after the last step, before its eval, predictions or export were "
                f"done: saved step {step}; rerun the same command to finish"
            )
        return result
    if config.export:
        model = runs.host_model(setup, state["params"], frozen)
        if is_primary:
            result["export"] = storage.join(workdir, EXPORT_DIR)
            heads.export_hf(
                model,
                run.labels,
                result["export"],
                run.vocab_file,
                config.data.do_lower_case,
                pad_id=run.tok.pad_id,
                special_ids={"cls": run.tok.cls_id, "sep": run.tok.sep_id},
            )
    return result
