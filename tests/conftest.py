"""Suite-wide setup: 8 fake CPU devices for mesh tests, set before JAX is imported."""
import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTDATA = REPO / "data_prep" / "testdata"


@pytest.fixture(scope="session")
def testdata():
    return TESTDATA


@pytest.fixture(scope="session")
def vocab_file():
    return str(TESTDATA / "bert-base-uncased-vocab.txt")
