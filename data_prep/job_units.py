"""The scaled and Beam jobs' per-unit work: a unit's documents -> its train and eval records."""

import dataclasses
import gc
import hashlib
import random

import numpy as np

from bert_jax.data.input import masking
from data_prep import content, output, readers
from data_prep import instances as inst
from data_prep import units as units_lib
from data_prep.job import SPLITS, JobSpec, seed


def is_eval(document: list[str], eval_fraction: float) -> bool:
    """Held out by a hash of the text: a document lands on the same side in every run and unit."""
    if eval_fraction <= 0:
        return False
    digest = hashlib.blake2b(
        "\n".join(document).encode("utf-8", "surrogatepass"), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") < eval_fraction * 2.0**64


@dataclasses.dataclass
class SplitRecords:
    data: bytes
    offsets: np.ndarray  # [instances + 1] int64: record i is data[offsets[i]:offsets[i + 1]]
    stats: output.InstanceStats
    documents: int


@dataclasses.dataclass
class UnitResult:
    unit: units_lib.Unit
    splits: dict  # "train"/"eval" -> SplitRecords
    read: readers.ReadStats
    content: str | None  # blake2b of the bytes the unit's reader read; None for TFDS

    def marker(self, stat: dict | None) -> dict:
        """What the shard plan and the manifest take of the unit, as JSON (the local runner's unit
        marker). `stat`: its file before it was read (content.file_stat)."""
        return {
            "unit": dataclasses.asdict(self.unit),
            "read": dataclasses.asdict(self.read),
            "content": content.record(self.content, stat),
            **{
                split: {
                    "instances": len(records.offsets) - 1,
                    "bytes": len(records.data),
                    "documents": records.documents,
                    "stats": dataclasses.asdict(records.stats),
                }
                for split, records in self.splits.items()
            },
        }


class UnitProcessor:
    """process(unit) -> UnitResult; holds what a worker keeps between units."""

    def __init__(self, spec: JobSpec, tokenizer):
        self.spec, self.tokenizer = spec, tokenizer
        self.vocab = masking.Vocab.from_tokenizer(tokenizer)
        self.vocab.check_whole_word(
            spec.opts.whole_word_mask and spec.opts.mask, repr(tokenizer.vocab_file)
        )
        self.encoder = inst.ExampleEncoder(spec.opts.schema)

    def process(self, unit: units_lib.Unit) -> UnitResult:
        # A unit makes a million short-lived objects, no cycles: collecting cost ~10% for nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            read = readers.ReadStats()
            docs = {split: [] for split in SPLITS}
            documents, digest = content.read_documents(
                unit, read, self.spec.text_field, self.spec.tfds_data_dir, self.spec.language
            )
            for document in documents:
                split = "eval" if is_eval(document, self.spec.eval_fraction) else "train"
                docs[split].append(document)
            splits = {split: self._split(unit, split, docs[split]) for split in SPLITS}
            return UnitResult(unit, splits, read, digest)
        finally:
            if collecting:
                gc.enable()

    def _split(self, unit: units_lib.Unit, split: str, documents: list) -> SplitRecords:
        spec, opts = self.spec, self.spec.opts
        if split == "eval":  # masked at eval_masked_lm_prob, whatever the training rate
            opts = dataclasses.replace(opts, masked_lm_prob=spec.eval_masked_lm_prob)
        split_id = SPLITS.index(split)
        # Later sentences follow as running text does (a tokenizer.json's " " sentence_joiner).
        joiner = getattr(self.tokenizer, "sentence_joiner", "")
        ids, per_line = self.tokenizer.encode_batch(
            [joiner + line if i else line for doc in documents for i, line in enumerate(doc)]
        )
        docs = inst.Documents.from_lines(ids, per_line, [len(doc) for doc in documents])
        rng = random.Random(repr(seed(spec, "structure", unit.index, split_id)))  # str: sha512
        spans: list = []
        make_spans = inst.nsp_spans if opts.nsp else inst.mlm_spans
        for _ in range(spec.dupe_factor if split == "train" else 1):  # eval: one pass, no dupes
            for index in range(len(docs.bounds)):
                make_spans(docs, index, opts, rng, spans)
        mask_rng = np.random.default_rng(seed(spec, "mask", unit.index, split_id))
        stats, chunks = output.InstanceStats(), []
        chunk = masking.chunk_rows(opts.max_seq_length)  # bounds a unit's temporaries
        for start in range(0, len(spans), chunk):
            batch = inst.assemble(docs, spans[start : start + chunk], opts, self.vocab)
            if opts.mask:
                inst.mask(batch, opts, self.vocab, mask_rng)
            chunks.extend(self.encoder.encode(batch))
            stats.instances += len(batch)
            stats.tokens += int(batch.length.sum())
            stats.masked += int(batch.num_masked.sum()) if opts.mask else 0
            stats.random_next += int(batch.random_next.sum())
        offsets = np.cumsum([0, *map(len, chunks)], dtype=np.int64)
        return SplitRecords(b"".join(chunks), offsets, stats, len(docs.bounds))
