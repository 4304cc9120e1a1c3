"""Issue 34's cases for the bad-input sweep (tests/e2e/test_bad_input_sweep.py): signals during an
eval and a checkpoint save, config fields out of their ranges, a UTF-16 dump's language, and the
smaller faults (a data_prep glob over its own output, a lone carriage return in a TSV field, an
export directory holding only .gitkeep, an output under /proc).

`make_files(d)` writes this module's files under the sweep's directory and returns placeholders;
`CASES` are (id, command line, expected) as the sweep's own: a `sweep_runs.Run` scenario, a check
of an input that must work, or the text the one error line must hold.

The signal cases start real processes (sweep_runs.start) and send the signal at a progress line:
the eval that line is followed by takes far longer than the signal's way there (hundreds of
batches), so a run that finished that eval before saving (the issue's case: over 300 s on a large
eval set) shows as the eval's row in metrics.jsonl.
"""

import bz2
import os
import shutil
import signal

from bert_jax.training import config_check, metrics_log
from support import make_wiki_dump
from support.checkpoints import saved_steps
from support.golden import GOLDEN_128, SAMPLE_128, TESTDATA
from support.sweep_inputs import _prep_as
from support.sweep_integrity import EXPORT, FINETUNE, PREP, TRAIN, _write
from support.sweep_runs import (
    Run,
    finetune,
    flag_value,
    one_error_line,
    run_again,
    signal_at_line,
    start,
)

# --- files -----------------------------------------------------------------------------------

# German rules keep "Am 3. Mai" in one sentence where English rules split it (test_wiki.py).
_GERMAN = (
    "Am {n}. Mai kam er mit dem Zug nach Berlin. Dort traf er seinen Bruder am Bahnhof. "
    "Am {m}. Juni fuhren beide weiter an die See. Sie blieben dort drei Wochen lang. "
    "Danach kehrten sie in die Stadt zurueck."
)


def _german_dumps(d) -> None:
    """A small German wiki (dewiki in its <siteinfo>) in UTF-8, UTF-16 and UTF-16BE without a
    byte-order mark, and the same pages under enwiki's <siteinfo> (split by English rules)."""
    pages = "".join(
        make_wiki_dump._page(i + 10, f"Seite {i}", "\n\n".join([_GERMAN.format(n=i, m=i + 1)] * 3))
        for i in range(1, 40)
    )
    english = make_wiki_dump.HEADER + pages + make_wiki_dump.FOOTER
    german = english.replace("enwiki", "dewiki").replace("en.wikipedia", "de.wikipedia")
    german = german.replace('xml:lang="en"', 'xml:lang="de"')

    def declared(text, encoding):
        return f'<?xml version="1.0" encoding="{encoding}"?>\n' + text

    _write(d / "dewiki8.xml", declared(german, "UTF-8").encode())
    _write(d / "dewiki16.xml", declared(german, "UTF-16").encode("utf-16"))
    _write(d / "dewiki16be-nobom.xml", declared(german, "UTF-16").encode("utf-16-be"))
    _write(d / "dewiki16.xml.bz2", bz2.compress(declared(german, "UTF-16").encode("utf-16")))
    _write(d / "enwiki8.xml", declared(english, "UTF-8").encode())


def make_files(d) -> dict:
    _german_dumps(d)
    good = "sentence\tlabel\n" + "".join(
        f"{w} movie\t{int(w == 'good')}\n" for w in ["good", "bad"] * 8
    )
    _write(d / "ft" / "sst_long_dev.tsv", good + good.split("\n", 1)[1] * 125)  # 2,016 rows
    # A lone CR inside line 2's text, a row without its label on line 4: the error must name
    # line 4 (the lone CR was a line break, and line 2 "a missing field").
    _write(d / "ft" / "sst_cr.tsv", "sentence\tlabel\ngood\rmovie\t1\nbad movie\t0\nno label\n")
    return {
        "golden_records": str(TESTDATA / GOLDEN_128),  # 2,367 records: a long eval at batch 2
        "sample_records": str(TESTDATA / SAMPLE_128),
    }


# --- signals (real processes) ----------------------------------------------------------------


def _evals(workdir: str) -> list[int]:
    return [r["step"] for r in metrics_log.read_jsonl(workdir) if r["split"] == "eval"]


def _sigterm_in_a_long_eval(binary: str):
    def scenario(ctx, o, module, args):
        """The issue's case: a SIGTERM during a long eval was ignored until the eval ended, and
        only then was the step saved. Step 2's eval (hundreds of batches) starts after its
        progress line: the signal there saves step 2 without that eval, and the rerun (without
        eval) resumes from step 2 and finishes."""
        workdir = flag_value(args, "--workdir")
        proc = start(ctx, module, args)
        out, err = signal_at_line(proc, r"step 2/", signal.SIGTERM)
        assert proc.returncode == 143 and "preempted: saved step 2;" in out, err[-3000:]
        saved = sorted(int(n) for n in os.listdir(f"{workdir}/checkpoints") if n.isdigit())
        assert saved == [2], (saved, err[-3000:])
        assert 2 not in _evals(workdir), err[-3000:]  # the eval was dropped, not finished
        rerun = run_again(ctx, module, [*args, "--config.data.eval_files=", "--verbosity=0"])
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        resumed = "resuming from" if binary == "train" else "at step 2"
        assert resumed in rerun.stdout + rerun.stderr and "finished at step" in rerun.stdout

    return scenario


def _sigterm_during_a_save(ctx, o, module, args):
    """A checkpoint every step (asynchronous): the SIGTERM comes as step 3's save starts; that
    save finishes, the run saves the step it stops at and exits 143, and the rerun resumes from
    it."""
    workdir = flag_value(args, "--workdir")
    proc = start(ctx, module, args)
    out, err = signal_at_line(proc, r"step 3/", signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    names = os.listdir(f"{workdir}/checkpoints")
    assert not [n for n in names if "tmp" in n], names  # no save left half-written
    last = max(int(n) for n in names if n.isdigit())
    assert 3 <= last < 8 and f"preempted: saved step {last};" in out, out[-3000:]
    rerun = run_again(ctx, module, args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {workdir}/checkpoints/{last}" in rerun.stdout
    assert saved_steps(workdir)[-1] == 8


def _steps(workdir: str) -> list[int]:
    """The finished steps under <workdir>/checkpoints, as on disk ([] if none)."""
    directory = f"{workdir}/checkpoints"
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return sorted(int(n) for n in names if n.isdigit())


def _ctrl_c_in_the_eval_at_start(ctx, o, module, args):
    """Issue 34's leftover: fine-tuning's eval at start (eval.at_start) ran outside the signal
    handling: a SIGTERM there killed the run unannounced, a Ctrl-C was a bare interrupt after
    the whole eval. A Ctrl-C as the run starts now stops that eval after its first batch with one
    line saying nothing was saved (no step was trained), exit 130; the rerun trains and
    finishes."""
    workdir = flag_value(args, "--workdir")
    proc = start(ctx, module, args)
    out, err = signal_at_line(proc, r"fine-tuning ", signal.SIGINT)
    one_error_line(
        proc.returncode, err, 130, "interrupted (Ctrl-C) before the first step", alone=False
    )
    assert _steps(workdir) == [] and 0 not in _evals(workdir), out[-3000:]
    rerun = run_again(ctx, module, [*args, "--config.eval.at_start=false"])
    assert rerun.returncode == 0 and "finished at step" in rerun.stdout, rerun.stderr[-3000:]


def _sigterm_in_the_final_eval(ctx, o, module, args):
    """Issue 34's leftover: fine-tuning's final eval (and its predictions) ran outside the signal
    handling, so a SIGTERM there killed the run. A SIGTERM at the last step's progress line now
    stops the run (the loop's save of that step, or the final eval after one batch), the last
    step saved and nothing exported, exit 143; the rerun resumes at that step, trains nothing,
    evaluates and exports."""
    workdir = flag_value(args, "--workdir")
    proc = start(ctx, module, args)
    out, err = signal_at_line(proc, r"step (\d+)/\1 ", signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in err, err[-3000:]
    last = _steps(workdir)
    assert len(last) == 1 and f"saved step {last[0]};" in out, (last, out[-3000:])
    assert not _evals(workdir) and not os.path.exists(f"{workdir}/export"), out[-3000:]
    rerun = run_again(ctx, module, args)
    assert rerun.returncode == 0 and f"finished at step {last[0]};" in rerun.stdout, rerun.stderr
    assert _evals(workdir) == last and os.path.isdir(f"{workdir}/export")
    assert _steps(workdir) == last


LONG_EVAL = (
    "bert_jax.main --config=configs/tiny.py --workdir={o}/run --config.mesh.num_devices=1 "
    "--config.data.train_files={sample_records} --config.data.eval_files={golden_records} "
    "--config.data.max_seq_length=128 --config.data.max_predictions_per_seq=20 "
    "--config.train.num_train_steps=4 --config.train.log_every_steps=1 "
    "--config.eval.every_steps=2 --config.eval.batch_size=2 --config.eval.num_examples=800 "
    "--config.checkpoint.every_steps=100"
)
LONG_FT_EVAL = finetune(
    extra="--config.data.eval_files={d}/ft/sst_long_dev.tsv --config.eval.every_steps=2 "
    "--config.eval.batch_size=2 --config.eval.at_start=false --config.train.batch_size=16 "
    "--config.train.log_every_steps=1 --config.checkpoint.every_steps=100 --config.export=false"
)
FT_EVAL_AT_START = finetune(
    extra="--config.data.eval_files={d}/ft/sst_long_dev.tsv --config.eval.batch_size=2 "
    "--config.eval.at_start=true --config.train.batch_size=16 --config.export=false"
)
FT_FINAL_EVAL = finetune(
    extra="--config.data.eval_files={d}/ft/sst_long_dev.tsv --config.eval.batch_size=2 "
    "--config.train.batch_size=16 --config.train.log_every_steps=1 --config.export=true"
)
SAVING = (
    "bert_jax.main --config=configs/tiny.py --workdir={o}/run --config.mesh.num_devices=1 "
    "--config.data.train_files={golden} --config.data.max_seq_length=128 "
    "--config.data.max_predictions_per_seq=20 --config.train.num_train_steps=8 "
    "--config.train.log_every_steps=1 --config.checkpoint.every_steps=1 "
    "--config.checkpoint.async_save=true --config.eval.every_steps=0"
)

# (A Ctrl-C during an eval takes the same path, then exits 130 as after any saved Ctrl-C:
# tests/e2e/test_faults.py sends both signals from inside an eval batch.)
SIGNALS = [
    (
        "signals: SIGTERM during a long pre-training eval saves its step, the rerun resumes",
        LONG_EVAL,
        Run("interrupt", _sigterm_in_a_long_eval("train"), real=True),
    ),
    (
        "signals: SIGTERM during a long fine-tuning eval saves its step, the rerun resumes",
        LONG_FT_EVAL,
        Run("interrupt", _sigterm_in_a_long_eval("finetune"), real=True),
    ),
    (
        "signals: Ctrl-C during fine-tuning's eval at start stops it, nothing to save",
        FT_EVAL_AT_START,
        Run("interrupt", _ctrl_c_in_the_eval_at_start, real=True),
    ),
    (
        "signals: SIGTERM during fine-tuning's final eval keeps the last step, the rerun finishes",
        FT_FINAL_EVAL,
        Run("interrupt", _sigterm_in_the_final_eval, real=True),
    ),
    (
        "signals: SIGTERM during a checkpoint save, the rerun resumes",
        SAVING,
        Run("interrupt", _sigterm_during_a_save, real=True),
    ),
]

# --- config fields ---------------------------------------------------------------------------


def _only(field: str, *absent: str):
    """The one error line names `field` and no other numeric field, nor any of `absent`."""

    def scenario(ctx, o, module, args):
        status, _, err = ctx["server"].run(module, args)
        line = one_error_line(status, err, 2, f"{field}=")
        others = [f for f in config_check.NUMERIC_FIELDS if f != field and f"{f}=" in line]
        assert not others and not [a for a in absent if a in line], line

    return Run("config", scenario)


def _field(case_id: str, line: str, field: str, *absent: str):
    return (case_id, line, _only(field, *absent))


# The cases, through the binaries: each error line names the one field set wrong.
CONFIGS = [
    _field(
        "config: train weight_decay NaN",
        TRAIN + " --config.optim.weight_decay=nan",
        "optim.weight_decay",
    ),
    (
        "config: train attention_impl cudnn on a CPU",
        TRAIN + " --config.model.attention_impl=cudnn",
        "model.attention_impl='cudnn' runs on a GPU only, and this run's devices are cpu",
    ),
    _field(
        "config: train max_grad_norm negative",
        TRAIN + " --config.optim.max_grad_norm=-1",
        "optim.max_grad_norm",
    ),
    _field(
        "config: train num_train_steps negative",
        TRAIN + " --config.train.num_train_steps=-3",
        "train.num_train_steps",
    ),
    _field(
        "config: train eval every -3", TRAIN + " --config.eval.every_steps=-3", "eval.every_steps"
    ),
    _field(
        "config: train dropout negative",
        TRAIN + " --config.model.hidden_dropout_prob=-0.1",
        "model.hidden_dropout_prob",
    ),
    _field(
        "config: finetune eval every -3",
        FINETUNE + " --config.eval.every_steps=-3",
        "eval.every_steps",
    ),
    _field(
        "config: finetune dropout negative",
        FINETUNE + " --config.model.hidden_dropout_prob=-0.1",
        "model.hidden_dropout_prob",
        "config.json",
    ),
    _field(
        "config: finetune warmup_proportion 2",
        FINETUNE + " --config.optim.warmup_proportion=2",
        "optim.warmup_proportion",
        "warmup_steps",
    ),
    _field(
        "config: finetune weight_decay NaN",
        FINETUNE + " --config.optim.weight_decay=nan",
        "optim.weight_decay",
    ),
    _field("config: finetune lora alpha inf", FINETUNE + " --config.lora.alpha=inf", "lora.alpha"),
]


# --- the smaller faults ----------------------------------------------------------------------


def _glob_over_own_output(ctx, o, module, args):
    """The issue's case: a rerun whose --input glob also matched the first run's shards called
    them "UTF-16 text without a byte-order mark". The rerun skips them with a warning and finds
    its job finished; an input that is only the job's output is refused."""
    out = flag_value(args, "--output_dir")
    os.makedirs(f"{o}/data/text")
    shutil.copy(ctx["pydocs"], f"{o}/data/text/corpus.txt")
    status, _, err = ctx["server"].run(module, args)
    assert status == 0, err[-3000:]
    first = sorted(os.listdir(out))
    status, _, err = ctx["server"].run(module, args)
    assert status == 0 and "also matches" in err and "this job's own output" in err, err[-3000:]
    assert sorted(os.listdir(out)) == first
    own = [a if not a.startswith("--input=") else f"--input={out}/*.arrayrecord" for a in args]
    status, _, err = ctx["server"].run(module, own)
    one_error_line(status, err, 2, ["names this job's own output", "--output_dir="])


def _export_beside_gitkeep(ctx, o, module, args):
    """The issue's case: an output directory holding only .gitkeep was refused as holding
    files not of ours; it counts as empty, and the .gitkeep stays."""
    out = flag_value(args, "--output_dir")
    os.makedirs(out)
    open(os.path.join(out, ".gitkeep"), "w").close()
    status, stdout, err = ctx["server"].run(module, args)
    assert status == 0 and "exported step" in stdout, err[-3000:]
    names = set(os.listdir(out))
    assert {".gitkeep", "config.json", "model.safetensors", "vocab.txt"} <= names, names


def _not_read_only(where: str):
    def scenario(ctx, o, module, args):
        """The issue's case: /proc/self (ENOENT: no files can be made there) was called a
        read-only file system."""
        status, _, err = ctx["server"].run(module, args)
        line = one_error_line(status, err, 2, [where, "No such file or directory"])
        assert "read-only" not in line, line

    return Run("paths", scenario)


def _finished(ctx, o, stdout):
    """An empty --config.data.labels= is no override (the layout's label set): before, it was
    the one label '' and every example was refused as not one of it."""
    assert "finished at step" in stdout, stdout[-2000:]


def _output_is_input(ctx, o, module, args):
    """An output flag naming the input file itself (data_prep.vocab and embed replaced the
    user's corpus and exited 0): refused naming both flags, the file left as it was. The input
    is a copy under the case's directory: a regression must not destroy the sweep's own."""
    os.makedirs(f"{o}/in", exist_ok=True)
    shutil.copy(ctx["d"] / "clean.txt", f"{o}/in/text.txt")
    before = open(f"{o}/in/text.txt", "rb").read()
    status, _, err = ctx["server"].run(module, args)
    out_flag = "--output_dir" if module == "data_prep.main" else "--output"
    one_error_line(status, err, 2, [f"{out_flag}='{o}/in/text.txt' is also read", "--input="])
    assert open(f"{o}/in/text.txt", "rb").read() == before


def _dump_as(reference: str, other: str):
    """data_prep's records from this dump are those from `reference`, and not those from
    `other` (the same pages split by another language's rules)."""
    same = _prep_as(reference)

    def check(ctx, o, stdout):
        same(ctx, o, stdout)
        os.rename(os.path.join(o, "ref"), os.path.join(o, "ref_same"))
        try:
            _prep_as(other)(ctx, o, stdout)
        except AssertionError:
            return  # other records: the language mattered
        raise AssertionError(f"{reference} and {other} give the same records: no language test")

    return check


PREP_TO = PREP.replace("--output_dir={o}/out", "--output_dir={o}/data/out")
SMALLER = [
    (
        "input UTF-16 German dump is split by its own language",
        PREP + " --input={d}/dewiki16.xml",
        _dump_as("dewiki8.xml", "enwiki8.xml"),
    ),
    (
        "input UTF-16BE German dump without BOM is split by its own language",
        PREP + " --input={d}/dewiki16be-nobom.xml",
        _prep_as("dewiki8.xml"),
    ),
    (
        "input UTF-16 German dump bz2 is split by its own language",
        PREP + " --input={d}/dewiki16.xml.bz2",
        _prep_as("dewiki8.xml"),
    ),
    (
        "rerun: an input glob over the job's own output skips it",
        PREP_TO + " --input={o}/data/*/*",
        Run("paths", _glob_over_own_output),
    ),
    (
        "finetune: TSV lone CR is text, the ragged line is named",
        FINETUNE + " --config.data.train_file={d}/ft/sst_cr.tsv",
        "sst_cr.tsv:4: 1 tab-separated fields",
    ),
    (
        "finetune: labels empty is the layout's set",
        FINETUNE + " --config.data.labels=",
        _finished,
    ),
    (
        "finetune: labels twice",
        FINETUNE + " --config.data.labels=0,1,0",
        "data.labels names '0' more than once",
    ),
    (
        "export: a directory of only .gitkeep works",
        EXPORT.replace("{d}/run", "{run24}") + " --step=2",
        Run("paths", _export_beside_gitkeep),
    ),
    (
        "vocab: output is its input",
        "data_prep.vocab --input={o}/in/text.txt --output={o}/in/text.txt --vocab_size=300",
        Run("paths", _output_is_input),
    ),
    (
        "embed: output is its input",
        "bert_jax.embed --model={d}/hf --input={o}/in/text.txt --output={o}/in/text.txt",
        Run("paths", _output_is_input),
    ),
    (
        "vocab: output matched by the input glob",
        "data_prep.vocab --input={o}/in/*.txt --output={o}/in/text.txt --vocab_size=300",
        Run("paths", _output_is_input),
    ),
    (
        "output_dir is the input file",
        PREP + " --input={o}/in/text.txt --output_dir={o}/in/text.txt",
        Run("paths", _output_is_input),
    ),
    (
        "finetune: predict with a pre-training workdir",
        "bert_jax.finetune --mode=predict --workdir={d}/run --test_file={d}/ft/sst_good.tsv",
        ("/run'", "holds a pre-training run, not a fine-tuning one"),
    ),
    (
        "export: a fine-tuning workdir",
        "bert_jax.export --workdir={ftrun} --output_dir={o}/hf",
        ("holds a fine-tuning run", "not a pre-training one", "/ft_run/export"),
    ),
    (
        "embed: a fine-tuning workdir",
        "bert_jax.embed --model={ftrun} --input={d}/clean.txt --output={o}/e.npz",
        ("holds a fine-tuning run", "not a pre-training one"),
    ),
    (
        "finetune: init a fine-tuning workdir",
        FINETUNE + " --init={ftrun}",
        ("holds a fine-tuning run", "not a pre-training one"),
    ),
    ("export: output_dir under /proc/self", EXPORT + " --output_dir=/proc/self/hf", None),
    ("finetune: workdir under /proc/self", FINETUNE + " --workdir=/proc/self/ft", None),
    ("train: workdir under /proc/self", TRAIN + " --workdir=/proc/self/run", None),
    ("output_dir under /proc/self", PREP + " --output_dir=/proc/self/out", None),
]


def _smaller(case):
    case_id, line, expected = case
    if expected is None:  # the /proc cases
        return (case_id, line, _not_read_only("/proc/self"))
    return case


CASES = SIGNALS + CONFIGS + [_smaller(case) for case in SMALLER]
