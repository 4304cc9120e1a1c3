"""Suite-wide setup: 8 fake CPU devices for mesh tests, set before JAX is imported."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTDATA = REPO / "data_prep" / "testdata"


@pytest.fixture(scope="session")
def testdata():
    return TESTDATA


@pytest.fixture(scope="session")
def vocab_file():
    return str(TESTDATA / "bert-base-uncased-vocab.txt")


@pytest.fixture(scope="session")
def tok(vocab_file):
    """bert-base-uncased's WordPiece tokenizer, lower-casing."""
    from bert_jax import tokenization

    return tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True)


@pytest.fixture(scope="session")
def unmask_records():
    """unmask_records(golden, path, limit=None) -> path: writes the records of `golden` (the
    first `limit`) with their masks undone and no masked_lm_* features: input for dynamic
    masking, in the format `path`'s name says."""

    def unmask(golden, path, limit=None):
        import itertools

        from bert_jax import features as F
        from bert_jax import record_io

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
    """save_checkpoint(workdir, model, config, step): a training checkpoint of an nnx model as
    bert_jax.checkpointing lays it out (the params and config items), for export/embed tests."""

    def save(workdir, model, config, step):
        import json

        import orbax.checkpoint as ocp
        from flax import nnx

        from bert_jax import checkpointing

        manager = checkpointing.make_manager(str(workdir), async_save=False)
        manager.save(
            step,
            args=ocp.args.Composite(
                **{
                    checkpointing.PARAMS: ocp.args.StandardSave(
                        nnx.to_pure_dict(nnx.state(model, nnx.Param))
                    ),
                    checkpointing.CONFIG: ocp.args.JsonSave(
                        json.loads(config.to_json_best_effort())
                    ),
                }
            ),
        )
        manager.wait_until_finished()

    return save
