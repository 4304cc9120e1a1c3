"""One command, one GLUE score table: fine-tunes a pre-trained model on each task of a directory in
GLUE's layout and prints the dev-set figures side by side.

    python -m bert_jax.finetune.glue_table --init=DIR --glue_dir=glue --workdir=runs/glue \
        [--tasks=cola,sst2,...] [--overrides=optim.learning_rate=3e-5,train.num_epochs=2]

Each task runs in <workdir>/<task> with its configs/finetune/<task>.py and --overrides; the same
command again resumes. docs/finetuning.md, "All of GLUE in one command: the score table".
"""

import ast
import dataclasses
import importlib
import json
import sys

from absl import flags

from bert_jax import cli, storage

FLAGS = flags.FLAGS
RESULT = "glue_result.json"


@dataclasses.dataclass(frozen=True)
class Task:
    """A GLUE task: its directory, layout, dev files and the figures GLUE reports for it."""

    name: str
    directory: str
    evals: tuple[str, ...] = ("dev",)  # dev file stems
    # (column, file stem, metric) of each figure GLUE reports
    figures: tuple[tuple[str, str, str], ...] = (("acc", "dev", "accuracy"),)


TASKS = {
    t.name: t
    for t in (
        Task("cola", "CoLA", figures=(("mcc", "dev", "mcc"),)),
        Task("sst2", "SST-2"),
        Task("mrpc", "MRPC", figures=(("f1", "dev", "f1"), ("acc", "dev", "accuracy"))),
        Task(
            "stsb",
            "STS-B",
            figures=(("pearson", "dev", "pearson"), ("spearman", "dev", "spearman")),
        ),
        Task("qqp", "QQP", figures=(("f1", "dev", "f1"), ("acc", "dev", "accuracy"))),
        Task(
            "mnli",
            "MNLI",
            evals=("dev_matched", "dev_mismatched"),
            figures=(("m", "dev_matched", "accuracy"), ("mm", "dev_mismatched", "accuracy")),
        ),
        Task("qnli", "QNLI"),
        Task("rte", "RTE"),
        Task("wnli", "WNLI"),
    )
}


def pick_tasks(glue_dir: str, names: list[str] | None) -> list[Task]:
    """`names` (each directory must be there), else every task `glue_dir` holds, in GLUE's order."""
    if not storage.isdir(glue_dir):
        raise cli.UserError(f"--glue_dir={glue_dir!r} is not a directory")
    if names:
        unknown = [n for n in names if n not in TASKS]
        if unknown:
            raise cli.UserError(f"--tasks: unknown {unknown}; choose from {list(TASKS)}")
        folders = [storage.join(glue_dir, TASKS[n].directory) for n in names]
        missing = [folder for folder in folders if not storage.isdir(folder)]
        if missing:
            raise cli.UserError(f"--tasks: no task directory {missing} in --glue_dir")
        return [TASKS[n] for n in names]
    found = [t for t in TASKS.values() if storage.isdir(storage.join(glue_dir, t.directory))]
    if not found:
        raise cli.UserError(
            f"--glue_dir={glue_dir!r} holds none of the GLUE task directories "
            f"{[t.directory for t in TASKS.values()]}"
        )
    return found


def parse_overrides(items: list[str]) -> dict:
    """["a.b=3e-5", ...] -> {"a.b": 3e-5}: a value is a Python literal where it parses as one."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise cli.UserError(f"--overrides: {item!r} is not FIELD=VALUE")
        if key.strip() in out:  # the last one won, silently
            raise cli.UserError(f"--overrides sets {key.strip()} twice; set each field once")
        try:
            out[key.strip()] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key.strip()] = text
    return out


def task_config(task: Task, glue_dir: str, overrides: dict):
    """The fine-tuning config of `task` on the files of `glue_dir`, `overrides` applied."""
    try:
        module = importlib.import_module(f"configs.finetune.{task.name}")
    except ModuleNotFoundError:
        module = importlib.import_module("configs.finetune.base")
    config = module.get_config()
    config.data.format, config.data.layout = "glue", task.name
    folder = storage.join(glue_dir, task.directory)
    config.data.train_file = storage.join(folder, "train.tsv")
    config.data.eval_files = ",".join(storage.join(folder, f"{e}.tsv") for e in task.evals)
    config.data.test_file = ""
    config.export = False
    for key, value in overrides.items():
        problem = cli.no_such_field(config, key.split("."))
        try:
            config.update_from_flattened_dict({} if problem else {key: value})
        except (KeyError, TypeError, AttributeError) as e:
            problem = e
        if problem:
            raise cli.UserError(
                f"--overrides: {key}={value!r} cannot be set on configs/finetune ({problem})"
            )
    return config


def run_task(task: Task, config, workdir: str, init: str, settings: dict) -> dict:
    """Fine-tunes (or resumes) one task -> its result (in <workdir>/glue_result.json when done)."""
    path = storage.join(workdir, RESULT)
    if storage.isfile(path):
        saved = json.loads(storage.read_text(path))
        if saved.get("settings") != settings:
            raise cli.UserError(
                f"{path} holds {task.name}'s result with other settings ({saved.get('settings')}"
                f", now {settings}): use another --workdir"
            )
        return saved
    from bert_jax.finetune import train  # JAX: after the flags are read

    result = train.finetune(config, workdir, init)
    out = {"task": task.name, "step": result["step"], "stopped": result["stopped"]}
    if result["stopped"] != "done":
        return out
    out["figures"], out["settings"] = {}, settings
    for column, stem, metric in task.figures:  # from the eval's {file stem: {metric: value}}
        value = (result["eval"].get(stem) or {}).get(metric)
        if value is None:
            raise cli.UserError(f"{task.name}: the run has no {metric!r} on {stem}.tsv")
        out["figures"][column] = float(value)
    storage.write_text(path, json.dumps(out, indent=2))
    return out


def table(results: dict[str, dict]) -> str:
    lines = ["| task | figures | score |", "| --- | --- | ---: |"]
    scores = []
    for name, result in results.items():
        values = result["figures"]
        score = 100 * sum(values.values()) / len(values)
        scores.append(score)
        shown = " / ".join(f"{column} {100 * v:.2f}" for column, v in values.items())
        lines.append(f"| {name} | {shown} | {score:.2f} |")
    if scores:
        lines.append(f"| average | {len(scores)} tasks | {sum(scores) / len(scores):.2f} |")
    return "\n".join(lines)


def run(init: str, glue_dir: str, workdir: str, names=None, overrides=None) -> dict:
    """Every task in turn, then the table -> {"results", "table", "stopped"}."""
    overrides = dict(overrides or {})
    tasks = pick_tasks(glue_dir, names)
    configs = {t.name: task_config(t, glue_dir, overrides) for t in tasks}  # mistakes first
    cli.check_writable_dir(workdir, "--workdir")
    settings = {"init": init, "overrides": {k: repr(v) for k, v in sorted(overrides.items())}}
    results, stopped = {}, "done"
    for task in tasks:
        result = run_task(
            task, configs[task.name], storage.join(workdir, task.name), init, settings
        )
        if result["stopped"] != "done":
            stopped = result["stopped"]
            break
        results[task.name] = result
    text = table(results)
    storage.makedirs(workdir)
    storage.write_text(storage.join(workdir, "glue_table.md"), text + "\n")
    storage.write_text(
        storage.join(workdir, "glue_results.json"),
        json.dumps({n: r["figures"] for n, r in results.items()}, indent=2),
    )
    return {"results": results, "table": text, "stopped": stopped}


def define_flags() -> None:
    """Defined when run as a program only, so importing this module defines no flags."""
    flags.DEFINE_string(
        "init", None, "Pre-trained model: a Hugging Face BERT directory or our workdir."
    )
    flags.DEFINE_string(
        "glue_dir", None, "The GLUE tasks in their download layout (CoLA/, SST-2/, ...)."
    )
    flags.DEFINE_string(
        "workdir", None, "Where each task's run goes (<workdir>/<task>) and the table."
    )
    flags.DEFINE_list("tasks", None, f"Tasks to run, of {list(TASKS)}; default: all found.")
    flags.DEFINE_list(
        "overrides", [], "FIELD=VALUE settings of configs/finetune for every task, comma-separated."
    )
    flags.mark_flags_as_required(["init", "glue_dir", "workdir"])


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    out = run(
        FLAGS.init, FLAGS.glue_dir, FLAGS.workdir, FLAGS.tasks, parse_overrides(FLAGS.overrides)
    )
    import jax

    if jax.process_index() == 0:
        print(out["table"], flush=True)
    if out["stopped"] != "done":
        from bert_jax.training import faults

        if out["stopped"] == "preempted":
            sys.exit(faults.PREEMPTED_STATUS)
        if out["stopped"] == "interrupted":
            cli.fail("interrupted: rerun the same command to resume", 130)
        sys.exit(1)  # nonfinite: the run said why


if __name__ == "__main__":
    define_flags()
    cli.run(main)
