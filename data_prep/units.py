"""Work units of the scaled job: the inputs cut into pieces that are read independently.

A unit is a byte block of a text or JSONL file, a whole gzip file (gzip cannot seek) or book
(data_prep/lines.py), a run of whole bz2 streams of a multistream Wikipedia dump
(data_prep/wiki.py), a run of row groups of a Parquet file (data_prep/parquet.py), or an index
range of a TFDS split. Units are planned from the inputs alone (their content kinds, sizes, a
dump's index, a Parquet footer, and the block size), so they, and every random choice seeded from
them, are the same whatever the number of workers. How each kind is planned and read is its entry
in data_prep/kinds.py.
"""

import dataclasses
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import cli
from data_prep import kinds
from data_prep.inputs import TEXT_FIELD, ReadStats, Source, open_input
from data_prep.sentences import DEFAULT_LANGUAGE

MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Unit:
    index: int  # position in the plan; part of every random seed of the unit
    kind: str  # "text" | "book" | "jsonl" | "wiki" | "parquet" | "tfds"
    path: str  # a file, or a TFDS dataset name
    start: int  # first byte (files), row group (Parquet) or example (TFDS)
    stop: int  # one past the last; a gzip file is one unit, start=0, stop=its size
    split: str = ""  # TFDS split
    first: bool = True  # the first unit of its source: it counts the file (and an empty one)
    compression: str = ""  # "" | "gzip" | "bz2": from the file's content, not its name
    weight: int = 0  # compressed bytes of Parquet row groups (their start/stop count groups)
    extent: str = ""  # what the plan saw of a dump or Parquet file, for the job's fingerprint

    @property
    def size(self) -> int:
        """Work estimate for progress and scheduling: bytes of a file block (of row groups for
        Parquet), examples of a TFDS range."""
        return self.weight or self.stop - self.start


def plan_units(
    sources: list[Source],
    block_bytes: int,
    tfds_examples_per_unit: int,
    tfds_data_dir: str | None = None,
    text_field: str = TEXT_FIELD,
) -> list[Unit]:
    """Cuts every source into units, in source order; depends on nothing but the inputs."""
    if block_bytes < 1 or tfds_examples_per_unit < 1:
        raise cli.UserError(
            f"block size {block_bytes} bytes and tfds_examples_per_unit="
            f"{tfds_examples_per_unit} must be positive"
        )
    planning = kinds.Planning(block_bytes, tfds_examples_per_unit, tfds_data_dir, text_field)
    units: list[Unit] = []
    for source in sources:
        for start, stop, fields in kinds.KINDS[source.kind].plan(source, planning):
            units.append(
                Unit(
                    len(units),
                    source.kind,
                    source.path,
                    start,
                    stop,
                    first=start == 0,
                    compression=source.compression,
                    **fields,
                )
            )
    return units


def read_unit(
    unit: Unit,
    stats: ReadStats,
    text_field: str = TEXT_FIELD,
    tfds_data_dir: str | None = None,
    open_binary: Callable[[str], BinaryIO] = open_input,
    language: str = DEFAULT_LANGUAGE,
) -> Iterator[list[str]]:
    """The documents (lists of sentence strings) of one unit, running text split into sentences
    by `language`'s rules; `open_binary` opens a path for reading with seek (the content hash
    passes one that hashes what is read)."""
    kind = kinds.KINDS[unit.kind]
    if kind.is_file and unit.first:
        stats.files += 1
        if unit.stop == 0:
            stats.empty_files += 1
            return
    reading = kinds.Reading(text_field, tfds_data_dir, open_binary, language)
    yield from kind.read_unit(unit, stats, reading)
