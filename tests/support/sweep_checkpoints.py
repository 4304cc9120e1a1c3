"""The bad-input sweep's checkpoint cases (issue 34): errors raised inside Orbax, through the
binaries, in the storage layer's words (bert_jax/storage/checks.py).

Before, Orbax's errors reached the user as its own text: a checkpoint whose files a bucket
refuses was called damaged and moved aside (a resume then went on from an older step, or failed
moving it); a save refused mid-run was hundreds of lines of tracebacks with TensorStore's spec;
a damaged step's missing file was named by a raw request URL; a garbled or missing config item
was a KeyError or JSONDecodeError traceback "bug". Now each is one `error:` line naming the
object (as the user's gs:// path) and the cause, and a step is called damaged only for damage.

`make_files(d)` writes the local damaged workdirs (and a fine-tuning run's, for the cases in
sweep_signals.py that give it where a pre-training run belongs); the bucket cases use
sweep_buckets' servers, with FlakyProxy refusing only the objects under one prefix.
"""

import json
import os
import shutil
import time
import urllib.request

from support.flaky_proxy import FlakyProxy
from support.sweep_buckets import GS, _run, _servers, _upload
from support.sweep_runs import Run, flag_value, one_error_line, train

# --- files -----------------------------------------------------------------------------------


def make_files(d) -> dict:
    """Copies of the sweep's {d}/run (step 4) with its config item garbled, and without it."""
    step = "checkpoints/4"
    shutil.copytree(d / "run", d / "run_config_garbled")
    with open(d / "run_config_garbled" / step / "config" / "metadata", "wb") as f:
        f.write(b'{"model": {"hidden_size": 3')  # cut short
    shutil.copytree(d / "run", d / "run_config_gone")
    shutil.rmtree(d / "run_config_gone" / step / "config")
    # A fine-tuning run's workdir, as far as its readers look first: its saved config.
    from configs.finetune import sst2

    shutil.copytree(d / "run", d / "ft_run")
    with open(d / "ft_run" / step / "config" / "metadata", "w") as f:
        f.write(sst2.get_config().to_json_best_effort())
    return {"ftrun": str(d / "ft_run")}


def _upload_tree(local, prefix: str) -> None:
    for folder, _, names in os.walk(local):
        for name in names:
            path = os.path.join(folder, name)
            _upload(f"{prefix}/{os.path.relpath(path, local)}", open(path, "rb").read())


def _checkpoint_objects(prefix: str) -> list[str]:
    """The step names under `prefix`/checkpoints in the sweep's bucket."""
    url = _SERVER_URL()
    query = f"prefix={prefix}/checkpoints/"
    with urllib.request.urlopen(f"{url}/storage/v1/b/{GS[5:]}/o?{query}", timeout=30) as response:
        items = json.load(response).get("items", [])
    return sorted({item["name"][len(prefix) + 1 :].split("/")[1] for item in items})


def _SERVER_URL() -> str:
    from support import sweep_buckets

    return sweep_buckets._SERVERS["gcs"].url


def _proxied(only: str, status: int = 403, missing: str = "") -> tuple[FlakyProxy, dict]:
    proxy = FlakyProxy(_SERVER_URL())
    proxy.only, proxy.fail_status, proxy.fail_rate = only, status, 1.0 if only else 0.0
    proxy.missing_downloads = missing
    return proxy, {"STORAGE_EMULATOR_HOST": proxy.url, "TENSORSTORE_GCS_HTTP_URL": proxy.url}


# --- scenarios -------------------------------------------------------------------------------


def _export_refused(ctx, o, module, args):
    """A step's files refused (403) while the listing answers: one line naming the object and
    the refusal, not "damaged"."""
    _servers(ctx)
    _upload_tree(ctx["run24"], "ck_run24")
    proxy, env = _proxied("ck_run24/checkpoints/4/")
    try:
        status, _, err, _ = _run(ctx, o, module, args, **env)
    finally:
        proxy.close()
    line = one_error_line(status, err, 2, [f"{GS}/ck_run24/checkpoints/4/", "Permission denied"])
    assert "damaged" not in line, line


def _export_file_gone(ctx, o, module, args):
    """A file of the step deleted (404 on its download): a damaged step, its file named by its
    gs:// path, never by the request URL the client used."""
    _servers(ctx)
    _upload_tree(ctx["run24"], "ck_gone")
    proxy, env = _proxied("", missing="ck_gone/checkpoints/4/params/_METADATA")
    try:
        status, _, err, _ = _run(ctx, o, module, args, **env)
    finally:
        proxy.close()
    line = one_error_line(
        status,
        err,
        2,
        ["checkpoints/4 is damaged", f"{GS}/ck_gone/checkpoints/4/params"],
        alone=False,  # TensorStore's INFO line on the test token may come first
    )
    assert err.count("\n") <= 2, err[-3000:]
    assert "http://" not in line and "alt=media" not in line, line


def _resume_refused(ctx, o, module, args):
    """The newest step's files refused on resume: before, it was taken for damage and moved
    aside (or the move failed with another error). Now one line naming it; nothing moved."""
    _servers(ctx)
    workdir = flag_value(args, "--workdir")
    prefix = workdir[len(GS) + 1 :]
    status, _, err, _ = _run(ctx, o, module, args)
    assert status == 0, err[-3000:]
    assert _checkpoint_objects(prefix) == ["1", "2"]
    proxy, env = _proxied(f"{prefix}/checkpoints/2/")
    more = [a for a in args if "num_train_steps" not in a] + ["--config.train.num_train_steps=3"]
    try:
        status, _, err, _ = _run(ctx, o, module, more, **env)
    finally:
        proxy.close()
    line = one_error_line(status, err, 2, [f"{workdir}/checkpoints/2/", "Permission denied"])
    assert "damaged" not in line and "moved" not in err, err[-3000:]
    assert _checkpoint_objects(prefix) == ["1", "2"]  # nothing moved aside


def _save_refused_mid_run(async_save: bool):
    def scenario(ctx, o, module, args):
        """The checkpoints refused from step 3 on (a bucket's permissions changed mid-run):
        the next save fails as one line naming the checkpoint object and the refusal, not
        Orbax's hundreds of lines of tracebacks."""
        servers = _servers(ctx)
        proxy, env = _proxied("")
        full = {**os.environ, **servers["env"], **env, "BERT_JAX_CACHE_DIR": f"{o}/cache"}
        child = ctx["server"].start(
            module, [*args, f"--config.checkpoint.async_save={async_save}"], env=full
        )
        start = time.monotonic()
        try:
            for line in child.stdout:
                if line.startswith("step 3/"):
                    proxy.only, proxy.fail_status, proxy.fail_rate = "checkpoints/", 403, 1.0
                    break
            _, err = child.communicate(timeout=300)
        finally:
            proxy.close()
        workdir = flag_value(args, "--workdir")
        one_error_line(
            child.returncode,
            err,
            2,
            [f"{workdir}/checkpoints", "Permission denied", "refused the credentials"],
            alone=False,
        )
        assert err.count("\n") <= 3, err[-3000:]  # no screen of Orbax's tracebacks
        assert time.monotonic() - start < 240

    return Run("buckets", scenario)


def _damaged_config(ctx, o, module, args):
    status, _, err = ctx["server"].run(module, args)
    line = one_error_line(status, err, 2, ["checkpoints/4 is damaged", "its config item"])
    assert "bug" not in line, line


MID_RUN = train(
    f"{GS}/ck_mid",
    6,
    "--config.train.log_every_steps=1 --config.checkpoint.every_steps=2 "
    "--config.eval.every_steps=0",
)

CASES = [
    (
        "checkpoints: export, a step's files refused in a bucket",
        f"bert_jax.export --workdir={GS}/ck_run24 --output_dir={{o}}/hf",
        Run("buckets", _export_refused),
    ),
    (
        "checkpoints: export, a step's file gone from a bucket",
        f"bert_jax.export --workdir={GS}/ck_gone --output_dir={{o}}/hf",
        Run("buckets", _export_file_gone),
    ),
    (
        "checkpoints: train resume, the newest step refused, nothing moved aside",
        train(
            f"{GS}/ck_resume",
            2,
            "--config.train.log_every_steps=1 --config.checkpoint.every_steps=1 "
            "--config.eval.every_steps=0 --config.optim.warmup_steps=1",
        ),
        Run("buckets", _resume_refused),
    ),
    (
        "checkpoints: train, saves refused mid-run (async)",
        MID_RUN.replace("ck_mid", "ck_mid_async"),
        _save_refused_mid_run(True),
    ),
    (
        "checkpoints: export, config item cut short",
        "bert_jax.export --workdir={d}/run_config_garbled --output_dir={o}/hf",
        Run("checkpoints", _damaged_config),
    ),
    (
        "checkpoints: export, config item gone",
        "bert_jax.export --workdir={d}/run_config_gone --output_dir={o}/hf",
        Run("checkpoints", _damaged_config),
    ),
    (
        "checkpoints: embed, config item cut short",
        "bert_jax.embed --model={d}/run_config_garbled --input={d}/clean.txt --output={o}/e.npz",
        Run("checkpoints", _damaged_config),
    ),
]
