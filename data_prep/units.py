"""Work units, and the one table of input kinds (`KINDS`): how each kind is planned into units and
how a unit is read; no other module branches on a kind's name. Units depend on the inputs alone.
What a unit of each kind is: docs/data_prep.md, "Scaled mode: how it works".
"""

import dataclasses
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import storage
from data_prep import lines, parquet, wiki
from data_prep.inputs import TEXT_FIELD, InputError, ReadStats, Source, open_input
from data_prep.sentences import DEFAULT_LANGUAGE, split_sentences

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
        """Work estimate for progress and scheduling: bytes, or examples of a TFDS range."""
        return self.weight or self.stop - self.start


@dataclasses.dataclass(frozen=True)
class Settings:
    text_field: str = TEXT_FIELD
    tfds_data_dir: str | None = None
    open_binary: Callable[[str], BinaryIO] = open_input  # reading
    language: str = DEFAULT_LANGUAGE  # reading
    block_bytes: int = sys.maxsize  # planning; the default: a whole source in one unit
    tfds_examples_per_unit: int = sys.maxsize  # planning


# A plan: the units of one source, each (start, stop, the Unit's other fields).
Plan = list[tuple[int, int, dict]]


@dataclasses.dataclass(frozen=True)
class Kind:
    plan: Callable[[Source, Settings], Plan]
    read_unit: Callable[..., Iterator[list[str]]]  # (unit, ReadStats, Settings)
    # False: a TFDS dataset (no stat, no content hash), trusted by its name and extent.
    is_file: bool = True
    # A whole source's one unit, where `plan` would do more (a dump's reads its index).
    plan_whole: Callable[[Source, Settings], Plan] | None = None


def open_tfds(name: str, split: str, data_dir: str | None):
    """A random-access TFDS data source, or an InputError that says what to do."""
    import tensorflow_datasets as tfds

    try:
        return tfds.data_source(name, split=split, data_dir=data_dir)
    except Exception as e:  # tfds raises many types for "not prepared" / "unknown name"
        raise InputError(
            f"cannot open TFDS dataset {name!r} split {split!r}: {e}. "
            "Prepare it first in ArrayRecord "
            f"format (`tfds build {name} --file_format=array_record`) and pass --tfds_data_dir"
        ) from e


def _tfds_documents(unit: Unit, stats: ReadStats, r: Settings) -> Iterator[list[str]]:
    source = open_tfds(unit.path, unit.split, r.tfds_data_dir)
    for index in range(unit.start, min(unit.stop, len(source))):
        example = source[index]
        if r.text_field not in example:
            raise InputError(
                f"TFDS dataset {unit.path!r} has no field {r.text_field!r}; fields: "
                f"{sorted(example)}; set --text_field"
            )
        text = example[r.text_field]
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
        sentences = split_sentences(text, r.language)
        if sentences:
            stats.documents += 1
            yield sentences


def _plan_tfds(source: Source, p: Settings) -> Plan:
    count = len(open_tfds(source.path, source.split, p.tfds_data_dir))
    return [
        (start, min(start + p.tfds_examples_per_unit, count), {"split": source.split})
        for start in range(0, max(count, 1), p.tfds_examples_per_unit)
    ]


KINDS: dict[str, Kind] = {
    "text": Kind(lines.plan, lines.opened(lines.text_unit)),
    "book": Kind(lines.plan, lines.opened(lines.book_unit)),
    "jsonl": Kind(lines.plan, lines.opened(lines.jsonl_unit)),
    "wiki": Kind(
        wiki.plan, wiki.read_unit, plan_whole=lambda s, p: [(0, storage.size(s.path), {})]
    ),
    "parquet": Kind(parquet.plan, parquet.read_unit),
    "tfds": Kind(_plan_tfds, _tfds_documents, is_file=False),
}


def plan_units(
    sources: list[Source],
    block_bytes: int,
    tfds_examples_per_unit: int,
    tfds_data_dir: str | None = None,
    text_field: str = TEXT_FIELD,
) -> list[Unit]:
    """Cuts every source into units, in source order; both sizes are positive (JobSpec's check)."""
    planning = Settings(
        text_field,
        tfds_data_dir,
        block_bytes=block_bytes,
        tfds_examples_per_unit=tfds_examples_per_unit,
    )
    units: list[Unit] = []
    for source in sources:
        for start, stop, fields in KINDS[source.kind].plan(source, planning):
            fields = {"first": start == 0, "compression": source.compression, **fields}
            units.append(Unit(len(units), source.kind, source.path, start, stop, **fields))
    return units


def read_unit(
    unit: Unit,
    stats: ReadStats,
    text_field: str = TEXT_FIELD,
    tfds_data_dir: str | None = None,
    open_binary: Callable[[str], BinaryIO] = open_input,
    language: str = DEFAULT_LANGUAGE,
) -> Iterator[list[str]]:
    """The documents of one unit; `open_binary` opens a path with seek (content.py's hashes)."""
    kind = KINDS[unit.kind]
    if unit.first:  # a source's first unit counts it (ReadStats.files: files and TFDS splits)
        stats.files += 1
        if kind.is_file and unit.stop == 0:
            stats.empty_files += 1
            return
    reading = Settings(text_field, tfds_data_dir, open_binary, language)
    yield from kind.read_unit(unit, stats, reading)
