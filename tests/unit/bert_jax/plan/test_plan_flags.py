"""python -m bert_jax.plan's flags, run as the binary (the fork server: a fork per case)."""

import pytest

PLAN = ["--config=configs/tiny.py", "--meshes=4x1x1", "--global_batch_sizes=8", "--steps=train"]


@pytest.mark.parametrize("topology", ["v5e-4", "cpu:4", "v5p-8"])
@pytest.mark.parametrize("num_devices", [-1, 4, 2**63])
def test_num_devices_with_a_topology_that_has_its_own_count_is_refused(
    forkserver, topology, num_devices
):
    """--num_devices is --topology=cpu's: given with a TPU slice or cpu:N it was ignored."""
    args = [*PLAN, f"--topology={topology}", f"--num_devices={num_devices}"]
    status, stdout, stderr = forkserver.run("bert_jax.plan", args)
    assert (status, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [
        f"error: --num_devices={num_devices} is for --topology=cpu (that many fake CPU devices); "
        f"--topology={topology} has its own count: drop it"
    ]
