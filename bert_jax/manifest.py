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
    shards             {"train": [{"file": name beside the manifest, "instances", "md5",
                                   "bytes": its size, checked when a job is rerun}],
                        "eval": [...]}
    stats, read, documents, seconds, flags, ...: the job's report; scaled and Beam jobs add
                       fingerprint (the settings a rerun must match) and inputs (per input file
                       its size, mtime_ns and a content hash, rechecked when a job is rerun)

No JAX import: data_prep (the writer) imports this module too.
"""

import hashlib

FILE = "manifest.json"
VERSION = 2


def _open_local(path: str):
    return open(path, "rb")


def file_md5(path: str, open_binary=None) -> str:
    """The md5 of a file, read in 1 MiB blocks; `open_binary` opens remote paths (Beam's
    FileSystems)."""
    digest = hashlib.md5()
    with (open_binary or _open_local)(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def vocab_entry(tokenizer, file: str | None = None, md5: str | None = None) -> dict:
    """The manifest's "vocab" block for a bert_jax.tokenization tokenizer; `file` and `md5` when
    the tokenizer was loaded from a local copy of a remote vocabulary (the Beam job)."""
    from bert_jax import tokenization  # no import cycle at module load

    kind = (
        "sentencepiece"
        if isinstance(tokenizer, tokenization.SentencePieceTokenizer)
        else "wordpiece"
    )
    return {
        "file": file or tokenizer.vocab_file,
        "md5": md5 or file_md5(tokenizer.vocab_file),
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


def contract_fields(
    *,
    mode: str,
    fmt: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    masked: bool,
    nsp: bool,
    whole_word_mask: bool,
    vocab: dict,
    shards: dict,
) -> dict:
    """The fields every writer sets (version 2, as the module docstring lists them); a job adds
    its report (stats, read, documents, seconds, flags, ...) to this dict."""
    return {
        "manifest_version": VERSION,
        "mode": mode,
        "format": fmt,
        "schema": {
            "max_seq_length": max_seq_length,
            "max_predictions_per_seq": max_predictions_per_seq if masked else 0,
        },
        "masked": masked,
        "nsp": nsp,
        "whole_word_mask": whole_word_mask,
        "vocab": vocab,
        "vocab_md5": vocab["md5"],
        "shards": shards,
    }
