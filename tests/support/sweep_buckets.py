"""The bad-input sweep's bucket and workdir-lock cases (issue 34), through the binaries as a user
meets them, against the local servers the suite already runs: fake-gcs-server (gs://) and moto's
S3 server (s3://), started once per test process on the first case, with FlakyProxy in front
where a case needs a server that refuses credentials, and a closed port for one that is down.

Each case is a sweep case, (id, command line, `Run`): the command line as a user types it and a
scenario that runs it with the servers' environment and asserts its outcome: exit status 2 and
one `error:` line naming the flag (or path) and the cause, no traceback, and nothing written
(no local `gs:` directory, no object added to the bucket, no file escaping the server's root);
where the server is down, the error comes within the retry budget. The classes: malformed
paths (schemes, slashes, dots, empty parts, bucket names, a bucket where a local directory
belongs), no such bucket, a missing object or a prefix where an object belongs, an input object
deleted mid-job, no or refused credentials, a server down from the start, checkpoints in s3://,
a count mismatch in a bucket (named by its gs:// path, not the local copy), and workdir locks
that cannot be read.
"""

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request

from support import fake_gcs
from support.flaky_proxy import FlakyProxy
from support.golden import REPO
from support.sweep_integrity import _id
from support.sweep_runs import Run, finetune, flag_value, one_error_line, train

GS = "gs://sweep-bkt"  # fake-gcs-server's bucket, made when the servers start
S3 = "s3://sweep-s3"
NO_BUCKET = "gs://no-such-sweep-bkt"
BUDGET_S = 2.0  # BERT_JAX_STORAGE_RETRY_S for the cases whose server is down
SLACK_S = 15.0  # the binary's start and its last try, on 2 cores under load (8.1 s seen at load 20)

_SERVERS: dict = {}


def _servers(ctx) -> dict:
    """The servers, started on the first case of this process, with the objects the cases read:
    the sweep's records (as they are, and with a manifest count off by one), a text input, and
    the vocabulary."""
    if _SERVERS:
        return _SERVERS
    from moto.server import ThreadedMotoServer

    root = tempfile.mkdtemp(prefix="sweep-gcs-")
    gcs = fake_gcs.Server(os.path.join(root, "data"))
    gcs.start()
    atexit.register(shutil.rmtree, root, True)
    atexit.register(gcs.stop)
    gcs.create_bucket(GS[5:])
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3.start()
    atexit.register(s3.stop)
    host, port = s3.get_host_and_port()
    aws = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # no credentials: no wait for an instance role
    }
    import boto3

    boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"], **_keys(aws)).create_bucket(
        Bucket=S3[5:]
    )
    _SERVERS.update(gcs=gcs, root=gcs.root, aws=aws, env={**gcs.env(), **aws})
    d = ctx["d"]
    records = d / "records"
    for name in sorted(os.listdir(records)):
        _upload(f"rec/{name}", (records / name).read_bytes())
    doc = json.loads((records / "manifest.json").read_text())
    doc["shards"]["train"][0]["instances"] -= 1  # md5 and size still those of the shard
    for name in sorted(os.listdir(records)):
        data = (records / name).read_bytes() if name != "manifest.json" else json.dumps(doc)
        _upload(f"rec_count/{name}", data.encode() if isinstance(data, str) else data)
    # TFRecord outputs damaged by sweep_integrity (record 3 of the eval shard; every training
    # record; a length CRC, found when the shard is indexed), their manifests' md5s and sizes
    # those of the damaged files: damage that came before the manifest (a bad disk under
    # data_prep), which the copy's md5 check cannot see and the read-time checks must.
    for name in ("rec_tf", "tf_every", f"tf_{_id('data')}", f"tf_{_id('length CRC')}"):
        _upload_output(d / name, name)
    _upload("corpus.txt", (d / "corpus.txt").read_bytes())
    _upload("vocab.txt", open(ctx["vocab"], "rb").read())
    _upload("lock/run/.lock", b"")  # a lock nobody can read, in a bucket
    return _SERVERS


def _upload_output(directory, prefix: str) -> None:
    """A data_prep output directory under `prefix`, its manifest's md5 and size of each shard
    those of the file as it is."""
    doc = json.loads((directory / "manifest.json").read_text())
    for entries in doc["shards"].values():
        for entry in entries:
            data = (directory / entry["file"]).read_bytes()
            entry.update(md5=hashlib.md5(data).hexdigest(), bytes=len(data))
    for name in sorted(os.listdir(directory)):
        if name != "manifest.json":
            _upload(f"{prefix}/{name}", (directory / name).read_bytes())
    _upload(f"{prefix}/manifest.json", json.dumps(doc).encode())


def _keys(aws: dict) -> dict:
    return {
        "aws_access_key_id": aws["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": aws["AWS_SECRET_ACCESS_KEY"],
        "region_name": aws["AWS_DEFAULT_REGION"],
    }


def _upload(name: str, data: bytes) -> None:
    """An object in GS, written through the JSON API (this process's own clients may point at
    another server: the suite's)."""
    url = _SERVERS["gcs"].url
    query = urllib.parse.urlencode({"uploadType": "media", "name": name})
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/{GS[5:]}/o?{query}", data=data, method="POST"
    )
    urllib.request.urlopen(request, timeout=30).read()


def _objects() -> list[str]:
    url = _SERVERS["gcs"].url
    with urllib.request.urlopen(f"{url}/storage/v1/b/{GS[5:]}/o", timeout=30) as response:
        return sorted(item["name"] for item in json.load(response).get("items", []))


def _on_disk() -> list[str]:
    """Everything under the server's root: an object named `../x` escaped its bucket there."""
    root = _SERVERS["root"]
    return sorted(
        os.path.relpath(os.path.join(f, n), root) for f, _, ns in os.walk(root) for n in ns
    )


def _run(ctx, o, module, args, **env) -> tuple[int, str, str, float]:
    """(status, stdout, stderr, seconds) of the command, its clients pointed at the servers, its
    local copies of bucket files under the case's directory."""
    full = {**os.environ, **_SERVERS["env"], "BERT_JAX_CACHE_DIR": os.path.join(o, "cache")}
    full.update(env)
    for key in [k for k, v in full.items() if v is None]:
        del full[key]
    start = time.monotonic()
    child = ctx["server"].start(module, args, env=full)
    try:
        child.wait(300)
    finally:
        out, err = child.communicate()
    return child.returncode, out, err, time.monotonic() - start


def refused(*names, env=None):
    """A mistake found before anything is written: exit 2, one line naming `names`, no object
    added, nothing under the server's root beside its bucket, no local `gs:` directory."""

    def scenario(ctx, o, module, args):
        _servers(ctx)
        before, disk = _objects(), _on_disk()
        extra = {k: v.format(o=o) if isinstance(v, str) else v for k, v in (env or {}).items()}
        status, _, err, _ = _run(ctx, o, module, args, **extra)
        one_error_line(status, err, 2, [n.format(o=o) for n in names])
        assert _objects() == before and _on_disk() == disk, (_objects(), _on_disk())
        assert not any(p.startswith(("gs:", "s3:")) for p in os.listdir(REPO))
        assert not any(p.startswith(("gs:", "s3:")) for p in os.listdir(o))

    return Run("buckets", scenario)


def through_proxy(status_code: int, *names):
    """Every request answered `status_code` (401: no credentials; 403: refused credentials), as
    GCS answers them: one line naming the path and which it is, never "does not exist"."""

    def scenario(ctx, o, module, args):
        servers = _servers(ctx)
        proxy = FlakyProxy(servers["gcs"].url)
        proxy.fail_status, proxy.fail_rate = status_code, 1.0
        try:
            env = {"STORAGE_EMULATOR_HOST": proxy.url, "TENSORSTORE_GCS_HTTP_URL": proxy.url}
            status, _, err, _ = _run(ctx, o, module, args, **env)
        finally:
            proxy.close()
        line = one_error_line(status, err, 2, list(names))
        assert "does not exist" not in line, line

    return Run("buckets", scenario)


def server_down(*names, s3=False):
    """The server down from the start (a closed port: every connection refused): one line naming
    the path, within the retry budget (it took 298-375 s with the default budget before: gcsfs'
    ~31 s of retries inside each of ours)."""

    def scenario(ctx, o, module, args):
        _servers(ctx)
        closed = f"http://127.0.0.1:{fake_gcs.free_port()}"
        env = {"BERT_JAX_STORAGE_RETRY_S": str(BUDGET_S)}
        if s3:
            env["AWS_ENDPOINT_URL"] = closed
        else:
            env.update(STORAGE_EMULATOR_HOST=closed, TENSORSTORE_GCS_HTTP_URL=closed)
        status, _, err, seconds = _run(ctx, o, module, args, **env)
        one_error_line(status, err, 2, ["did not serve the request after its retries", *names])
        assert seconds <= BUDGET_S + SLACK_S, seconds

    return Run("buckets", scenario)


def _count_names_the_bucket_path(ctx, o, module, args):
    """A shard whose manifest count is off, in a bucket: the error named the local cache copy
    (~/.cache/bert_jax/...), not the path the user gave."""
    _servers(ctx)
    status, _, err, _ = _run(ctx, o, module, args)
    shard = f"{GS}/rec_count/{ctx['shard']}"
    line = one_error_line(status, err, 2, [f"{shard} holds ", "its manifest lists"])
    assert os.path.join(o, "cache") not in line, line


def _damage_names_the_bucket_path(*names):
    """A damaged record in a shard read from a bucket: named by its gs:// path, as a local
    shard's is, never by the local cache copy the reader opened."""

    def scenario(ctx, o, module, args):
        _servers(ctx)
        status, _, err, _ = _run(ctx, o, module, args)
        line = one_error_line(status, err, 2, [n.format(**ctx) for n in names])
        assert os.path.join(o, "cache") not in line, line

    return Run("buckets", scenario)


def _lock_dir(ctx, o, module, args):
    """A `.lock` that is a directory (a traceback before): refused naming it, left alone."""
    workdir = flag_value(args, "--workdir")
    os.makedirs(os.path.join(workdir, ".lock"))
    status, _, err, _ = _run(ctx, o, module, args)
    one_error_line(status, err, 2, [f"{workdir}/.lock is a directory, not a lock file"])
    assert os.listdir(workdir) == [".lock"] and os.listdir(os.path.join(workdir, ".lock")) == []


def _lock_unreadable(content: bytes, flag="--workdir"):
    """A lock that cannot be read and was written just now: taken over at once before (two
    starting runs could both pass: the first's lock is empty until it writes it); refused now,
    saying when it will be taken over, and left as it was."""

    def scenario(ctx, o, module, args):
        directory = flag_value(args, flag)
        os.makedirs(directory)
        with open(os.path.join(directory, ".lock"), "wb") as f:
            f.write(content)
        status, _, err, _ = _run(ctx, o, module, args)
        one_error_line(status, err, 2, [f"{directory}/.lock cannot be read", "600 s old"])
        assert os.listdir(directory) == [".lock"]
        assert open(os.path.join(directory, ".lock"), "rb").read() == content

    return Run("buckets", scenario)


def _deleted_mid_job(ctx, o, module, args):
    """An input object that goes between the job's look at it and its read (deleted mid-job): a
    proxy answers 404 to its downloads while its metadata still answers. A traceback before."""
    servers = _servers(ctx)
    proxy = FlakyProxy(servers["gcs"].url)
    proxy.missing_downloads = "corpus.txt"
    try:
        env = {"STORAGE_EMULATOR_HOST": proxy.url, "TENSORSTORE_GCS_HTTP_URL": proxy.url}
        status, _, err, _ = _run(ctx, o, module, args, **env)
    finally:
        proxy.close()
    one_error_line(status, err, 2, [f"{GS}/corpus.txt does not exist"])


PREP = (
    "data_prep.main --input={d}/corpus.txt --vocab_file={vocab} --output_dir={o}/out "
    "--num_workers=1 --progress=false --max_seq_length=64 --max_predictions_per_seq=10 "
    "--dupe_factor=1"
)
DECODE = "data_prep.decode --vocab_file={vocab} --limit=1"
EXPORT = "bert_jax.export --workdir={d}/run --output_dir={o}/hf"
EMBED = "bert_jax.embed --model={d}/hf --input={d}/clean.txt --output={o}/e.npz"
VOCAB = "data_prep.vocab --input={d}/corpus.txt --output={o}/v.txt --vocab_size=300"
DATA = f"{GS}/tf_{_id('data')}"  # sweep_integrity's TFRecord output, record 3 damaged
LENGTH = f"{GS}/tf_{_id('length CRC')}"
RECORDS_64 = "--config.data.max_seq_length=64 --config.data.max_predictions_per_seq=10"
R64 = RECORDS_64

CASES = [
    # --- malformed paths: one line naming the flag, before anything is written ---------------
    (
        "buckets: output_dir gs:/x (one slash)",
        PREP + " --output_dir=gs:/sweep-bkt/out",
        refused("--output_dir='gs:/sweep-bkt/out'", "needs two slashes, one given"),
    ),
    (
        "buckets: output_dir gs:// alone",
        PREP + " --output_dir=gs://",
        refused("--output_dir='gs://' names no bucket"),
    ),
    (
        "buckets: output_dir with a .. part",
        PREP + f" --output_dir={GS}/a/../out",
        refused(f"--output_dir='{GS}/a/../out' has a '..' part"),
    ),
    (
        "buckets: output_dir with an empty part",
        PREP + f" --output_dir={GS}//out",
        refused(f"--output_dir='{GS}//out' has an empty part"),
    ),
    (
        "buckets: output_dir a bucket name with capitals",
        PREP + " --output_dir=gs://Sweep_Bkt/out",
        refused("'Sweep_Bkt' is not a valid bucket name"),
    ),
    (
        "buckets: input a scheme not served",
        PREP + " --input=http://example.com/corpus.txt",
        refused("--input='http://example.com/corpus.txt' http:// paths are not supported"),
    ),
    (
        "buckets: input GS:// in capitals",
        PREP + f" --input=GS://{GS[5:]}/corpus.txt",
        refused("write gs:// in lower case"),
    ),
    (
        "buckets: vocab_file with no bucket",
        PREP + " --vocab_file=gs:///vocab.txt",
        refused("--vocab_file='gs:///vocab.txt' names no bucket"),
    ),
    (
        "buckets: vocab output file://",
        VOCAB + " --output=file:///tmp/v.txt",
        refused("--output='file:///tmp/v.txt'", "pass the local path itself"),
    ),
    (
        "buckets: train workdir gs:/x",
        train("gs:/sweep-bkt/run"),
        refused("--workdir='gs:/sweep-bkt/run' is not a bucket URL"),
    ),
    (
        "buckets: train workdir gs:// alone",
        train("gs://"),
        refused("--workdir='gs://' names no bucket"),
    ),
    (
        "buckets: train train_files one slash",
        train(extra="--config.data.train_files=gs:/sweep-bkt/rec"),
        refused("config.data.train_files='gs:/sweep-bkt/rec' is not a bucket URL"),
    ),
    (
        "buckets: train cache_dir in a bucket",
        train(extra=f"--config.data.cache_dir={GS}/cache"),
        refused(f"config.data.cache_dir='{GS}/cache' must be a local directory"),
    ),
    (
        "buckets: export output_dir with a .. part",
        EXPORT + f" --output_dir={GS}/../hf",
        refused(f"--output_dir='{GS}/../hf' has a '..' part"),
    ),
    (
        "buckets: embed output one slash",
        EMBED + " --output=gs:/sweep-bkt/e.npz",
        refused("--output='gs:/sweep-bkt/e.npz' is not a bucket URL"),
    ),
    (
        "buckets: finetune init one slash",
        finetune(extra="--init=gs:/sweep-bkt/hf"),
        refused("--init='gs:/sweep-bkt/hf' is not a bucket URL"),
    ),
    # --- no such bucket: the same words for every binary, before anything is written ---------
    (
        "buckets: train workdir in a missing bucket",
        train(f"{NO_BUCKET}/run"),
        refused(f"--workdir='{NO_BUCKET}/run' does not exist: there is no bucket"),
    ),
    (
        "buckets: data_prep output_dir in a missing bucket",
        PREP + f" --output_dir={NO_BUCKET}/out",
        refused(f"--output_dir='{NO_BUCKET}/out' does not exist: there is no bucket"),
    ),
    (
        "buckets: export output_dir in a missing bucket",
        EXPORT + f" --output_dir={NO_BUCKET}/hf",
        refused(f"--output_dir='{NO_BUCKET}/hf' does not exist: there is no bucket"),
    ),
    (
        "buckets: decode input in a missing bucket",
        DECODE + f" --input={NO_BUCKET}/x.arrayrecord",
        refused(f"--input='{NO_BUCKET}/x.arrayrecord' does not exist: there is no bucket"),
    ),
    (
        "buckets: s3 output_dir in a missing bucket",
        PREP + " --output_dir=s3://no-such-sweep-s3/out",
        refused("--output_dir='s3://no-such-sweep-s3/out' does not exist: there is no bucket"),
    ),
    # --- a missing object, a prefix where an object belongs, an object deleted mid-job -------
    (
        "buckets: decode a missing object",
        DECODE + f" --input={GS}/nope.arrayrecord",
        refused(f"--input='{GS}/nope.arrayrecord' does not exist"),
    ),
    (
        "buckets: decode a prefix",
        DECODE + f" --input={GS}/rec",
        refused(f"--input='{GS}/rec' is a directory (a prefix of objects), not a file"),
    ),
    (
        "buckets: vocab_file a prefix",
        PREP + f" --vocab_file={GS}/rec",
        refused(f"'{GS}/rec' is a directory (a prefix of objects), not a file"),
    ),
    (
        "buckets: embed input a missing object",
        EMBED + f" --input={GS}/nope.txt",
        refused(f"--input='{GS}/nope.txt' does not exist"),
    ),
    (
        "buckets: s3 decode a missing object",
        DECODE + f" --input={S3}/nope.arrayrecord",
        refused(f"--input='{S3}/nope.arrayrecord' does not exist"),
    ),
    (
        "buckets: an input object deleted mid-job",
        PREP + f" --input={GS}/corpus.txt",
        Run("buckets", _deleted_mid_job),
    ),
    # --- credentials ------------------------------------------------------------------------
    (
        "buckets: decode with no credentials",
        DECODE + f" --input={GS}/rec/manifest.json",
        through_proxy(401, f"{GS}/rec/manifest.json", "Permission denied (no credentials"),
    ),
    (
        "buckets: output_dir with refused credentials",
        PREP + f" --output_dir={GS}/out",
        through_proxy(403, f"--output_dir='{GS}/out'", "refused the credentials in use"),
    ),
    (
        "buckets: s3 input with no credentials",
        DECODE + f" --input={S3}/x.arrayrecord",
        refused(
            f"{S3}/x.arrayrecord: Permission denied (no credentials",
            env={"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "HOME": "{o}"},
        ),
    ),
    # --- the server down from the start -------------------------------------------------------
    (
        "buckets: decode, server down from the start",
        DECODE + f" --input={GS}/rec/manifest.json",
        server_down(f"{GS}/rec/manifest.json"),
    ),
    (
        "buckets: train workdir, server down from the start",
        train(f"{GS}/run"),
        server_down(f"{GS}/run"),
    ),
    (
        "buckets: s3 output_dir, server down from the start",
        PREP + f" --output_dir={S3}/out",
        server_down(f"{S3}/out", s3=True),
    ),
    # --- checkpoints in s3://: refused up front ---------------------------------------------
    (
        "buckets: train workdir in s3",
        train(f"{S3}/run"),
        refused(f"--workdir='{S3}/run': checkpoints cannot be kept in s3://"),
    ),
    (
        "buckets: finetune workdir in s3",
        finetune(f"{S3}/ft"),
        refused(f"--workdir='{S3}/ft': checkpoints cannot be kept in s3://"),
    ),
    (
        "buckets: export workdir in s3",
        EXPORT + f" --workdir={S3}/run",
        refused(f"--workdir='{S3}/run': checkpoints cannot be kept in s3://"),
    ),
    # --- a count mismatch names the path the user gave ----------------------------------------
    (
        "buckets: train manifest count in a bucket",
        train(extra=f"--config.data.train_files={GS}/rec_count {RECORDS_64}"),
        Run("buckets", _count_names_the_bucket_path),
    ),
    # --- a damaged record in a bucket names the path the user gave --------------------------
    (
        "buckets: train a damaged TFRecord eval record in a bucket",
        train(extra=f"--config.data.train_files={GS}/rec_tf --config.data.eval_files={DATA} {R64}"),
        _damage_names_the_bucket_path(f"{DATA}/{{tfeval}}: record 3 is damaged"),
    ),
    (
        "buckets: train a TFRecord length CRC in a bucket, found when indexed",
        train(
            extra=f"--config.data.train_files={GS}/rec_tf --config.data.eval_files={LENGTH} {R64}"
        ),
        _damage_names_the_bucket_path(f"{LENGTH}/{{tfeval}}: record 3 is damaged"),
    ),
    (
        "buckets: train every training record damaged in a bucket",
        train(extra=f"--config.data.train_files={GS}/tf_every --config.data.eval_files= {R64}"),
        _damage_names_the_bucket_path(f"{GS}/tf_every/", "is damaged", "bad_records=skip"),
    ),
    (
        "buckets: decode a damaged TFRecord in a bucket",
        "data_prep.decode --vocab_file={vocab} --skip=1000000 --limit=1 "
        f"--input={DATA}/{{tfeval}}",
        _damage_names_the_bucket_path(f"{DATA}/{{tfeval}}: record 3 is damaged"),
    ),
    (
        "buckets: verify a TFRecord length CRC in a bucket",
        f"data_prep.main --verify --output_dir={LENGTH}",
        _damage_names_the_bucket_path(f"{LENGTH}/{{tfeval}}: record 3 is damaged"),
    ),
    # --- workdir locks that cannot be read ----------------------------------------------------
    ("buckets: lock a directory", train(), Run("buckets", _lock_dir)),
    ("buckets: lock empty", train(), _lock_unreadable(b"")),
    ("buckets: lock not JSON", train(), _lock_unreadable(b'{"host": "vm", "pi')),
    (
        "buckets: export lock a list",
        EXPORT,
        _lock_unreadable(b"[1, 2]", flag="--output_dir"),
    ),
    (
        "buckets: lock in a bucket empty",
        train(f"{GS}/lock/run"),
        refused(f"{GS}/lock/run/.lock cannot be read (it is empty)", "600 s old"),
    ),
]
