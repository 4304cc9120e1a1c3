"""manifest.json: the data contract between data_prep and every stage that reads records.

data_prep writes it beside the shards when a job has finished (never before: a directory without
one is unfinished). The trainer, eval, export, embed and fine-tuning read it instead of asking the
user to retype the data's facts into a config. Fields (version 2; every writer sets all of them):

    manifest_version   2
    mode, format       how the job ran ("scaled" | "reference"), "arrayrecord" | "tfrecord"
    schema             {"max_seq_length": L, "max_predictions_per_seq": P}; P is 0 for unmasked
                       records (written for dynamic masking)
    masked, nsp        bool, bool
    whole_word_mask    bool: how the masks in the records were drawn (unmasked records: how the
                       job was asked to mask, a default for the trainer's dynamic masking)
    vocab              {"file": the path as given, "md5", "size": ids 0..size-1,
                        "kind": "wordpiece" | "sentencepiece", "do_lower_case": bool,
                        "special_ids": {"pad", "unk", "cls", "sep", "mask"}}
    vocab_md5          = vocab.md5 (what version-1 manifests had)
    shards             {"train": [{"file": name beside the manifest, "instances", "md5"}],
                        "eval": [...]}
    stats, read, documents, seconds, flags, fingerprint, ...: the job's report

No JAX import: data_prep (the writer) imports this module too.
"""

import hashlib

FILE = "manifest.json"
VERSION = 2


def file_md5(path: str) -> str:
    """The md5 of a file, read in 1 MiB blocks."""
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def vocab_entry(tokenizer) -> dict:
    """The manifest's "vocab" block for a bert_jax.tokenization tokenizer."""
    from bert_jax import tokenization  # no import cycle at module load

    kind = (
        "sentencepiece"
        if isinstance(tokenizer, tokenization.SentencePieceTokenizer)
        else "wordpiece"
    )
    return {
        "file": tokenizer.vocab_file,
        "md5": file_md5(tokenizer.vocab_file),
        "size": int(tokenizer.vocab_size),
        "kind": kind,
        "do_lower_case": bool(tokenizer.do_lower_case),
        "special_ids": {
            "pad": int(tokenizer.pad_id),
            "unk": int(tokenizer.unk_id),
            "cls": int(tokenizer.cls_id),
            "sep": int(tokenizer.sep_id),
            "mask": int(tokenizer.mask_id),
        },
    }
