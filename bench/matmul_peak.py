"""The machine's attainable matmul peak: MFU's denominator for the CPU benches (train_bench).

The model FLOPs they divide by it are bert_jax.plan.flops's count.
"""

import time

import jax
import jax.numpy as jnp


class MatmulPeak:
    """Times an n x n x n matmul with jnp.dot: the attainable peak FLOP/s of this device.

    A large square fp32 matmul is the best-case kernel; MFU over this figure says how close the
    whole train step gets to it. Call `measure()` between the timed runs of a benchmark, so the
    peak sees the same machine load as the steps it is compared with.
    """

    def __init__(self, n: int = 2048, dtype=jnp.float32):
        self.n = n
        key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
        self.a = jax.random.normal(key_a, (n, n), dtype)
        self.b = jax.random.normal(key_b, (n, n), dtype)
        self.fn = jax.jit(jnp.dot)
        self.fn(self.a, self.b).block_until_ready()  # compile

    def measure(self, repeats: int = 3) -> tuple[float, float]:
        """(FLOP/s of the fastest of `repeats` matmuls, FLOP per CPU-second of the same one).

        The second figure divides by this process's CPU time (all threads) instead of wall time:
        on a machine shared with other work it moves much less than the first.
        """
        best, best_cpu = float("inf"), float("inf")
        for _ in range(repeats):
            cpu, start = time.process_time(), time.perf_counter()
            self.fn(self.a, self.b).block_until_ready()
            wall = time.perf_counter() - start
            if wall < best:
                best, best_cpu = wall, time.process_time() - cpu
        flop = 2 * self.n**3
        return flop / best, flop / max(best_cpu, 1e-9)
