"""The data_prep jobs: sources -> tokenized documents -> instances -> record shards + manifest.

`run_reference` is the original generator's procedure, for exact reproduction: the whole corpus in
memory, one random generator for everything, one output file. The scaled job (streaming, parallel,
resumable) lives in scaled.py and shares the per-document functions used here.
"""

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import random
import time

from bert_jax import features as F
from bert_jax import record_io
from data_prep import instances as inst
from data_prep import readers, records

MANIFEST = "manifest.json"


class OutputError(OSError):
    """An output directory that cannot be written; the message says what to fix."""


def shard_name(split: str, index: int, count: int, fmt: str) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{record_io.suffix(fmt)}"


def prepare_output_dir(output_dir: str) -> None:
    """Creates the directory and proves it is writable before any work is done."""
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, f".write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise OutputError(f"cannot write to --output_dir={output_dir!r}: {e.strerror or e}") from e


def file_md5(path: str) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomic(path: str, obj) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def tokenize_document(document: list[str], tokenizer) -> list[list[int]]:
    """Sentences -> ids; sentences with no tokens are dropped (as the original does)."""
    out = []
    for sentence in document:
        ids = tokenizer.encode(sentence)
        if ids:
            out.append(ids)
    return out


def schema_for(opts: inst.InstanceOptions) -> F.Schema:
    return F.Schema(opts.max_seq_length, opts.max_predictions_per_seq if opts.mask else 0)


@dataclasses.dataclass
class InstanceStats:
    """Token and masking statistics for the manifest and the end-of-job summary."""

    instances: int = 0
    tokens: int = 0  # real tokens, [CLS]/[SEP] included
    masked: int = 0
    random_next: int = 0

    def add_instance(self, instance: inst.Instance) -> None:
        self.instances += 1
        self.tokens += len(instance.tokens)
        self.masked += len(instance.masked_lm_positions)
        self.random_next += int(instance.is_random_next)

    def add(self, other: "InstanceStats") -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def summary(self, max_seq_length: int) -> dict:
        n = max(self.instances, 1)
        return {
            "instances": self.instances,
            "tokens": self.tokens,
            "mean_tokens_per_instance": self.tokens / n,
            "padding_fraction": 1.0 - self.tokens / (n * max_seq_length),
            "mask_rate": self.masked / max(self.tokens, 1),
            "masked_per_instance": self.masked / n,
            "random_next_fraction": self.random_next / n,
        }


def run_reference(
    specs: list[str],
    tokenizer,
    opts: inst.InstanceOptions,
    *,
    dupe_factor: int,
    seed: int,
    output_dir: str,
    fmt: str,
    flags: dict,
    text_field: str = "text",
    tfds_data_dir: str | None = None,
) -> dict:
    """The original generator, record for record: returns the manifest it writes."""
    start = time.time()
    prepare_output_dir(output_dir)
    sources = readers.parse_input(specs)
    read_stats = readers.ReadStats()
    # The original reads all files as one line stream, so a document can run across a file boundary.
    text_lines = itertools.chain.from_iterable(
        readers.read_lines(s.path, read_stats) for s in sources if s.kind == "text"
    )
    raw_docs = itertools.chain(
        readers.text_documents(text_lines, read_stats),
        *(
            readers.documents(s, read_stats, text_field, tfds_data_dir)
            for s in sources
            if s.kind != "text"
        ),
    )
    documents = [tokenize_document(d, tokenizer) for d in raw_docs]
    logging.info("read %d documents in %.1fs", len(documents), time.time() - start)

    vocab = inst.Vocab.from_tokenizer(tokenizer)
    instances = inst.create_training_instances(
        documents, opts, vocab, dupe_factor, random.Random(seed)
    )
    schema = schema_for(opts)
    stats = InstanceStats()
    path = os.path.join(output_dir, shard_name("train", 0, 1, fmt))
    with record_io.RecordWriter(path, fmt) as writer:
        for instance in instances:
            writer.write(records.serialize(instance, schema))
            stats.add_instance(instance)
    manifest = {
        "mode": "reference",
        "format": fmt,
        "masked": opts.mask,
        "flags": flags,
        "vocab_md5": file_md5(tokenizer.vocab_file),
        "read": dataclasses.asdict(read_stats),
        "documents": sum(1 for d in documents if d),
        "shards": {
            "train": [
                {
                    "file": os.path.basename(path),
                    "instances": stats.instances,
                    "md5": file_md5(path),
                }
            ]
        },
        "stats": stats.summary(opts.max_seq_length),
        "seconds": round(time.time() - start, 3),
    }
    write_json_atomic(os.path.join(output_dir, MANIFEST), manifest)
    return manifest
