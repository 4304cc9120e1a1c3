"""The one table of input kinds: for each, how its units are planned and how a unit is read.
Planning (units.plan_units), the scaled and Beam jobs' unit reading (units.read_unit) and
whole-input reading (readers.documents: vocab training, --mode=reference; one unit a source)
all look a kind up here; no other module branches on a kind's name.

A source's kind comes from its content (sniff.sniff: "text", "jsonl", "wiki", "parquet", or a
dump's "index", which is never read as a corpus), refined by readers.source_of: text in a
.jsonl/.json file is "jsonl", and with --document_per_file text is "book"; a `tfds:` input is
"tfds".
"""

import dataclasses
from collections.abc import Callable, Iterator
from typing import BinaryIO

from bert_jax import storage
from data_prep import lines, parquet, tfds_input, wiki
from data_prep.inputs import TEXT_FIELD, Source, open_input
from data_prep.sentences import DEFAULT_LANGUAGE


@dataclasses.dataclass(frozen=True)
class Planning:
    """What planning a source's units takes besides the source."""

    block_bytes: int
    tfds_examples_per_unit: int
    tfds_data_dir: str | None = None
    text_field: str = TEXT_FIELD


@dataclasses.dataclass(frozen=True)
class Reading:
    """What reading a unit or a whole source takes besides it."""

    text_field: str = TEXT_FIELD
    tfds_data_dir: str | None = None
    open_binary: Callable[[str], BinaryIO] = open_input
    language: str = DEFAULT_LANGUAGE


# A plan: the units of one source, each (start, stop, the Unit's other fields).
Plan = list[tuple[int, int, dict]]


@dataclasses.dataclass(frozen=True)
class Kind:
    plan: Callable[[Source, Planning], Plan]
    read_unit: Callable[..., Iterator[list[str]]]  # (unit, ReadStats, Reading)
    # A file (stat, content hash; its first unit counts it in ReadStats.files and an empty one);
    # False: a TFDS dataset, trusted by its name and extent.
    is_file: bool = True
    # A whole source's one unit, where `plan` with unbounded blocks would do more: a dump's plan
    # reads its index (and refuses one of another dump), which reading it whole never needs.
    plan_whole: Callable[[Source, Planning], Plan] | None = None


def _plan_tfds(source: Source, p: Planning) -> Plan:
    count = len(tfds_input.open_tfds(source.path, source.split, p.tfds_data_dir))
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
    "tfds": Kind(
        _plan_tfds,
        lambda u, stats, r: tfds_input.tfds_documents(
            u.path, u.split, r.text_field, r.tfds_data_dir, stats, u.start, u.stop, r.language
        ),
        is_file=False,
    ),
}


def is_file(kind: str) -> bool:
    """Whether a unit or source of `kind` is a file (see Kind.is_file)."""
    return KINDS[kind].is_file
