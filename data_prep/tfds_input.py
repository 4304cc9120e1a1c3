"""TFDS datasets as input, written `tfds:NAME[:SPLIT]`: read with `tfds.data_source` (no TensorFlow
needed; the dataset must be prepared in ArrayRecord format), by ranges of examples."""

from collections.abc import Iterator

from data_prep.inputs import InputError, ReadStats
from data_prep.sentences import DEFAULT_LANGUAGE, split_sentences


def open_tfds(name: str, split: str, data_dir: str | None):
    """A random-access TFDS data source (len() and indexing), or an InputError that says what to
    do."""
    import tensorflow_datasets as tfds

    try:
        return tfds.data_source(name, split=split, data_dir=data_dir)
    except Exception as e:  # tfds raises many types for "not prepared" / "unknown name"
        raise InputError(
            f"cannot open TFDS dataset {name!r} split {split!r}: {e}. "
            "Prepare it first in ArrayRecord "
            f"format (`tfds build {name} --file_format=array_record`) and pass --tfds_data_dir"
        ) from e


def tfds_documents(
    name: str,
    split: str,
    text_field: str,
    data_dir: str | None,
    stats: ReadStats,
    start: int = 0,
    stop: int | None = None,
    language: str = DEFAULT_LANGUAGE,
) -> Iterator[list[str]]:
    """Documents of examples [start, stop) of a TFDS split (all by default); the first range counts
    the file."""
    source = open_tfds(name, split, data_dir)
    if start == 0:
        stats.files += 1
    for index in range(start, len(source) if stop is None else min(stop, len(source))):
        example = source[index]
        if text_field not in example:
            raise InputError(
                f"TFDS dataset {name!r} has no field {text_field!r}; fields: {sorted(example)}; "
                "set --text_field"
            )
        text = example[text_field]
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
        sentences = split_sentences(text, language)
        if sentences:
            stats.documents += 1
            yield sentences
