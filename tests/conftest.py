"""Suite-wide setup: 8 fake CPU devices for mesh tests, set before JAX is imported."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

from support.golden import REPO, TESTDATA


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory):
    """One persistent compilation cache per pytest worker, for this process and every binary a
    test starts (they inherit the environment): most tests compile the same few tiny-BERT
    programs, and on CPU compiling is about half of a short run. Each worker writes only its own
    directory and adopts the others' finished entries before each test (support/jax_cache.py);
    a test that kills its processes mid-run gives them a seeded directory of their own
    (test_faults)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as cc

    from support import jax_cache

    mine = tmp_path_factory.getbasetemp() / "jax_cache"
    settings = {
        "jax_compilation_cache_dir": str(mine),
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": -1,
        # By default JAX points XLA's GPU autotuning cache into the cache directory, and that path
        # is part of every entry's key: the same program had another key in each directory, so no
        # directory could serve another's processes. XLA's GPU caches do nothing on CPU.
        "jax_persistent_cache_enable_xla_caches": "none",
    }
    for name, value in settings.items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)
    cc.reset_cache()
    return jax_cache.Adopter(mine, lambda: jax_cache.worker_dirs(mine))


@pytest.fixture(autouse=True)
def _adopt_other_workers_cache_entries(jax_compilation_cache):
    jax_compilation_cache.adopt()


@pytest.fixture(scope="session")
def forkserver():
    """Runs binaries as forked children of one process that imported the heavy libraries
    (support/forkrun.py): a process start's 2-3 CPU-s of imports paid once per worker."""
    from support.forkrun import Server

    server = Server(str(REPO))
    yield server
    server.close()


@pytest.fixture(scope="session")
def testdata():
    return TESTDATA


@pytest.fixture(scope="session")
def vocab_file():
    return str(TESTDATA / "bert-base-uncased-vocab.txt")


@pytest.fixture(scope="session")
def tok(vocab_file):
    """bert-base-uncased's WordPiece tokenizer, lower-casing."""
    from bert_jax.text import tokenization

    return tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    """A random tiny BERT saved as a Hugging Face directory (tests/support/finetune_data.py's
    vocabulary and shape): what the fine-tuning tests start from. Read-only for the tests."""
    from support import finetune_data

    return finetune_data.save_tiny_hf(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def unmask_records():
    """unmask_records(golden, path, limit=None) -> path: writes the records of `golden` (the
    first `limit`) with their masks undone and no masked_lm_* features: input for dynamic
    masking, in the format `path`'s name says."""

    def unmask(golden, path, limit=None):
        import itertools

        from bert_jax.data.contract import features as F
        from bert_jax.data.contract import record_io

        with record_io.RecordWriter(str(path)) as w:
            for r in itertools.islice(record_io.read_records(str(golden)), limit):
                ex = F.decode_example(r)
                ids, real = ex[F.INPUT_IDS].copy(), ex[F.MASKED_LM_WEIGHTS] > 0
                ids[ex[F.MASKED_LM_POSITIONS][real]] = ex[F.MASKED_LM_IDS][real]
                unmasked = {F.INPUT_IDS: ids, **{k: ex[k] for k in F.UNMASKED_FEATURES[1:]}}
                w.write(F.encode_example(unmasked))
        return str(path)

    return unmask


@pytest.fixture(scope="session")
def save_checkpoint():
    """save_checkpoint(workdir, model, config, step, with_checksums=True): a training checkpoint
    of an nnx model as bert_jax.training.checkpoints lays it out (the params, config and checksums
    items), for export/embed tests. with_checksums=False: as written before checksums existed."""

    def save(workdir, model, config, step, with_checksums=True):
        import json

        import orbax.checkpoint as ocp
        from flax import nnx

        from bert_jax.training import checkpoints, checksums

        params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
        items = {
            checkpoints.PARAMS: ocp.args.StandardSave(params),
            checkpoints.CONFIG: ocp.args.JsonSave(json.loads(config.to_json_best_effort())),
        }
        if with_checksums:
            items[checkpoints.CHECKSUMS] = ocp.args.JsonSave(
                checksums.record({checkpoints.PARAMS: params})
            )
        manager = checkpoints.make_manager(str(workdir), async_save=False)
        manager.save(step, args=ocp.args.Composite(**items))
        manager.wait_until_finished()

    return save


@pytest.fixture(scope="session")
def flip_bytes():
    """flip_bytes(step_dir): inverts 4 bytes at a third, half and two thirds of the largest array
    file of the step's params item, as a failing disk or a bad copy does. Orbax usually restores
    such a step without an error (the word embeddings come back with NaNs and huge values): only
    the checksums catch it (support.checkpoints.FLIPPED_PARAMS: what the refusal says)."""

    def flip(step_dir):
        files = [
            p
            for p in pathlib.Path(step_dir, "params").rglob("*")
            if p.is_file() and p.parent.name == "d"
        ]
        largest = max(files, key=lambda p: p.stat().st_size)
        size = largest.stat().st_size
        with open(largest, "r+b") as f:
            for offset in (size // 3, size // 2, 2 * size // 3):
                f.seek(offset)
                data = f.read(4)
                f.seek(offset)
                f.write(bytes(b ^ 0xFF for b in data))

    return flip


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
    """fake-gcs-server for this pytest worker, with every GCS client of this process and of the
    binaries tests start (they inherit the environment) pointed at it: see
    tests/support/fake_gcs.py."""
    from support import fake_gcs

    server = fake_gcs.Server(str(tmp_path_factory.mktemp("gcs")))
    server.start()
    os.environ.update(server.env())
    yield server
    server.stop()


@pytest.fixture
def bucket(gcs, request):
    """A new empty bucket on the test server: its gs:// URL."""
    import re
    import uuid

    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return gcs.create_bucket(f"{name}-{uuid.uuid4().hex[:8]}")
