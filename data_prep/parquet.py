"""Parquet files -> documents, one per row; a unit is a run of whole row groups, of which only the
--text_field column is read, in batches (docs/data_prep.md, "Parquet").
"""

from collections.abc import Iterator
from typing import BinaryIO

from data_prep import inputs
from data_prep.sentences import split_sentences

_BATCH_ROWS = 256


def _open(path: str, f: BinaryIO):
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(f)
    except (pyarrow.ArrowException, OSError) as e:
        raise inputs.InputError(f"input {path!r} is not a readable Parquet file ({e})") from None


def _is_text(kind) -> bool:
    """Strings, or UTF-8 bytes, or a dictionary of either (the views only in newer pyarrows)."""
    import pyarrow as pa

    value = kind.value_type if pa.types.is_dictionary(kind) else kind
    kinds = ("string", "large_string", "binary", "large_binary", "string_view", "binary_view")
    return any(getattr(pa.types, f"is_{name}", lambda _: False)(value) for name in kinds)


def _check_text_column(path: str, parquet, text_field: str) -> None:
    """The text field must be a text column: another would read as no documents at all."""
    schema = parquet.schema_arrow
    if text_field not in schema.names:
        raise inputs.InputError(
            f"Parquet file {path!r} has no column {text_field!r}; columns: {schema.names}; "
            "set --text_field"
        )
    kind = schema.field(text_field).type
    if not _is_text(kind):
        text_columns = [f.name for f in schema if _is_text(f.type)]
        raise inputs.InputError(
            f"Parquet file {path!r}: column {text_field!r} holds {kind}, not text; "
            f"text columns: {text_columns}; set --text_field"
        )


def plan(source: inputs.Source, planning) -> list[tuple[int, int, dict]]:
    """(first row group, end row group, {"weight": compressed bytes, "extent"}) of each unit, runs
    of whole row groups of about planning.block_bytes."""
    path = source.path
    with inputs.open_input(path) as f:
        parquet = _open(path, f)
        _check_text_column(path, parquet, planning.text_field)
        meta = parquet.metadata
        sizes = [
            sum(meta.row_group(g).column(c).total_compressed_size for c in range(meta.num_columns))
            for g in range(meta.num_row_groups)
        ]
    spans, first, size = [], 0, 0
    for group, group_size in enumerate(sizes):
        if group > first and size + group_size > planning.block_bytes:
            spans.append((first, group, size))
            first, size = group, 0
        size += group_size
    spans.append((first, len(sizes), size))
    extent = f"{sum(sizes)} bytes, {len(sizes)} row groups, {meta.num_rows} rows"
    return [(start, stop, {"weight": weight, "extent": extent}) for start, stop, weight in spans]


def _values(column) -> list:
    """A batch's values: str, bytes or None; a string column of bad UTF-8 is read as bytes, which
    the caller decodes as text lines are."""
    import pyarrow as pa

    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        return column.cast(pa.large_binary()).to_pylist()


def read_unit(unit, stats: inputs.ReadStats, reading) -> Iterator[list[str]]:
    """The documents of a unit's row groups [start, stop), one per row."""
    import pyarrow

    with reading.open_binary(unit.path) as f:
        parquet = _open(unit.path, f)
        try:
            batches = parquet.iter_batches(
                _BATCH_ROWS, row_groups=range(unit.start, unit.stop), columns=[reading.text_field]
            )
            for batch in batches:
                for text in _values(batch.column(0)):
                    if isinstance(text, bytes):  # a binary column: UTF-8 as text lines are
                        text = inputs.decode_line(text, stats)
                    is_text = isinstance(text, str)
                    sentences = split_sentences(text, reading.language) if is_text else []
                    if sentences:
                        stats.documents += 1
                        yield sentences
        except (pyarrow.ArrowException, OSError) as e:
            raise inputs.truncated(unit.path, e) from None
