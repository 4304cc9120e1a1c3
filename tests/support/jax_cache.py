"""The suite's persistent JAX compilation caches: one per pytest worker, each adopting the finished
entries of the others.

Why not one directory for all workers: JAX writes an entry in place (`LRUCache.put`: `write_bytes`,
no rename), so a process of one worker could read an entry another is still writing, or one left
cut by a process a test killed, and print a warning on stderr, where the bad-input sweep asserts
exactly one line. So each worker (and the binaries its tests start) writes only its own directory,
and before each test `adopt` hard-links into it the entries of the other workers' directories
that are complete: settled for a few seconds and decompressing whole (an entry is a zstd or zlib
frame, which knows its own length, so a cut one fails). JAX never rewrites an entry that exists,
so a linked entry stays whole. A test that kills its processes at random moments gives them a
directory of their own, seeded the same way (`seed`).

Measured on the project's 2-core machine: docs/testing.md, "Kept".
"""

import os
import pathlib
import time

SUFFIX = "-cache"  # jax._src.lru_cache._CACHE_SUFFIX: the entries; nothing else is adopted
SETTLED_S = 2.0  # an entry not written for this long is not being written


def _whole(path: str) -> bool:
    from jax._src import compilation_cache

    try:
        # O_NOATIME: reading it here is not a use of the entry.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOATIME", 0))
    except OSError:
        return False
    try:
        with os.fdopen(fd, "rb") as f:
            compilation_cache.decompress_executable(f.read())
        return True
    except Exception:  # zstd's or zlib's error on a cut or foreign file
        return False


class Adopter:
    """Links complete entries of `sources` (other cache directories) into `mine`; remembers what
    it has looked at, so each entry is read once."""

    def __init__(self, mine, sources):
        self.mine = pathlib.Path(mine)
        # A callable -> directories, listed again each time: workers start at different moments.
        self.sources = sources
        self.done: set[str] = set()

    def adopt(self) -> int:
        now, count = time.time(), 0
        self.mine.mkdir(parents=True, exist_ok=True)
        for source in self.sources():
            if pathlib.Path(source) == self.mine:
                continue
            try:
                entries = list(os.scandir(source))
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                if name in self.done or not name.endswith(SUFFIX):
                    continue
                try:
                    if now - entry.stat().st_mtime < SETTLED_S:
                        continue  # maybe still being written: the next test looks again
                except OSError:
                    continue
                self.done.add(name)
                target = self.mine / name
                if target.exists() or not _whole(entry.path):
                    continue
                try:
                    os.link(entry.path, target)
                    count += 1
                except OSError:  # written here meanwhile, or another file system
                    pass
        return count


def worker_dirs(mine) -> list[pathlib.Path]:
    """The cache directories of all pytest-xdist workers of this session, `mine` among them:
    <session basetemp>/popen-gw*/jax_cache; a run without xdist has only its own (its basetemp's
    siblings are earlier sessions)."""
    mine = pathlib.Path(mine)
    if not mine.parent.name.startswith("popen-gw"):
        return [mine]
    return sorted(mine.parent.parent.glob(f"popen-gw*/{mine.name}"))


def seed(directory, worker_cache) -> None:
    """A private cache `directory` (for processes a test kills) starting with every complete entry
    of the session's worker caches."""
    Adopter(directory, lambda: worker_dirs(worker_cache)).adopt()
