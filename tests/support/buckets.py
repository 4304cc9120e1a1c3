"""Records and uploads for the bucket (gs://) tests: a finished data_prep output made of the golden
records, and a local directory copied into a bucket."""

import json
import os

from bert_jax import storage
from bert_jax.data.contract import features, manifest, record_io
from bert_jax.text import tokenization
from support.golden import GOLDEN_128

VOCAB = "bert-base-uncased-vocab.txt"


def write_records(directory, testdata, vocab_path: str, shards=(2, 1)) -> str:
    """A finished data_prep output made of the golden pydocs records: `shards` (train, eval)
    ArrayRecord shards and a version-2 manifest whose vocabulary file is `vocab_path`."""
    os.makedirs(directory, exist_ok=True)
    records = list(record_io.read_records(str(testdata / GOLDEN_128)))
    vocab = str(testdata / VOCAB)
    per_shard = len(records) // sum(shards)
    entries, start = {"train": [], "eval": []}, 0
    for split, count in zip(("train", "eval"), shards):
        for i in range(count):
            name = f"{split}-{i:05d}-of-{count:05d}.arrayrecord"
            part = records[start : start + per_shard]
            start += per_shard
            path = os.path.join(directory, name)
            with record_io.RecordWriter(path) as w:
                for r in part:
                    w.write(r)
            entries[split].append(
                {
                    "file": name,
                    "instances": len(part),
                    "md5": storage.md5(path),
                    "bytes": os.path.getsize(path),
                }
            )
    body = manifest.contract_fields(
        "scaled",
        "arrayrecord",
        features.Schema(128, 20),
        nsp=True,
        whole_word_mask=False,
        vocab=manifest.vocab_entry(tokenization.make_tokenizer(vocab), file=vocab_path),
        shards=entries,
    )
    with open(os.path.join(directory, manifest.FILE), "w") as f:
        json.dump(body, f)
    return str(directory)


def upload(local_dir: str, url: str) -> str:
    for name in sorted(os.listdir(local_dir)):
        with open(os.path.join(local_dir, name), "rb") as f:
            storage.write_bytes(storage.join(url, name), f.read())
    return url
