"""Corpora -> documents (lists of sentences): what each --input is, by its content (sniff.py), and
a whole source's documents, read as one work unit. The kinds, and which bad input is an error and
which is counted and skipped: docs/data_prep.md, "Input".
"""

import glob

from bert_jax import cli, storage
from data_prep import sniff, units, wiki
from data_prep.inputs import (  # re-exported: the readers' API
    TEXT_FIELD,
    InputError,
    ReadStats,
    Source,
    open_input,
)
from data_prep.sentences import DEFAULT_LANGUAGE


def match_files(spec: str) -> list[str]:
    return checked(expand(spec))


def expand(spec: str) -> list[str]:
    """A glob's matches, sorted (none: the file so named, as a shell does); a plain spec itself."""
    if not glob.has_magic(spec):
        return [spec]
    return storage.glob(spec) or ([spec] if storage.exists(spec) else [])


def checked(paths: list[str]) -> list[str]:
    for path in paths:
        try:
            storage.check_file(path, "input")
        except cli.UserError as e:
            raise InputError(str(e)) from None
    return paths


def source_of(path: str, document_per_file: bool = False) -> Source:
    """The source a file is, by its content (and, for text, by its name: .jsonl/.json)."""
    try:
        with open_input(path) as f:
            content = sniff.sniff(f)
    except sniff.NotText as e:
        raise InputError(f"input {path!r} {e}") from None
    kind = content.kind
    if kind == "text":  # JSON lines by content (sniff) or by name (a first line that is not JSON)
        jsonl = path.removesuffix(".gz").endswith((".jsonl", ".json"))
        kind = "jsonl" if jsonl else "book" if document_per_file else "text"
    return Source(kind, path, compression=content.compression, encoding=content.encoding)


def parse_input(
    specs: list[str], match=match_files, document_per_file: bool = False
) -> list[Source]:
    """Files, globs and `tfds:` names -> sources, in a stable order; `match(spec)` lists files."""
    sources = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if spec.startswith("tfds:"):
            name, _, split = spec[len("tfds:") :].partition(":")
            sources.append(Source("tfds", name, split or "train"))
            continue
        paths = match(spec)
        if not paths:
            raise InputError(f"--input pattern {spec!r} matches no file")
        sources.extend(source_of(path, document_per_file) for path in paths)
    sources = _without_dump_indexes(sources)
    if not sources:
        raise InputError("no input given: pass --input=FILE[,GLOB,tfds:NAME:SPLIT]")
    return sources


def _without_dump_indexes(sources: list[Source]) -> list[Source]:
    """The sources less multistream indexes, which a glob over a dump's directory names: the dump
    finds its own; an index without its dump among the inputs is an error."""
    indexes_in_use = {wiki.index_path(s.path) for s in sources if s.kind == "wiki"}
    for source in sources:
        if source.kind == "index" and source.path not in indexes_in_use:
            raise InputError(
                f"input {source.path!r} is the index of a multistream Wikipedia dump, not a "
                "corpus: pass the dump itself (...-pages-articles-multistream.xml.bz2); its index "
                "is found beside it by name"
            )
    return [s for s in sources if s.kind != "index"]


def documents(
    source: Source,
    stats: ReadStats,
    text_field: str = TEXT_FIELD,
    tfds_data_dir: str | None = None,
    language: str = DEFAULT_LANGUAGE,
):
    """The documents of one whole source, read as one unit (as the scaled job's units read it)."""
    kind = units.KINDS[source.kind]
    planning = units.Settings(text_field, tfds_data_dir)
    [(start, stop, fields)] = (kind.plan_whole or kind.plan)(source, planning)
    unit = units.Unit(
        0, source.kind, source.path, start, stop, compression=source.compression, **fields
    )
    yield from units.read_unit(unit, stats, text_field, tfds_data_dir, language=language)
