"""data_prep end to end with a Hugging Face tokenizer.json: a BPE trained by `data_prep.vocab
--model_type=bpe`, then MLM-only records masked at 30% (whole words) with the eval split at 15%,
whose ids are the library's for the corpus's documents; and a Unigram file with RoBERTa-style
special tokens, whose ids the manifest records."""

import json

import numpy as np
import pytest
import tokenizers

from bert_jax.data.contract import features as F
from bert_jax.data.contract import record_io
from support import tokenizer_files


def records(out, split: str) -> list[dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [
        F.decode_example(r)
        for shard in manifest["shards"][split]
        for r in record_io.read_records(str(out / shard["file"]))
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The bundled prose as documents of several sentences (blank lines between documents)."""
    lines = list(tokenizer_files.corpus_lines())
    docs = [lines[i : i + 12] for i in range(0, len(lines), 12)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path, docs


@pytest.fixture(scope="module")
def bpe(corpus, forkserver, tmp_path_factory):
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    code, out, err = forkserver.run(
        "data_prep.vocab",
        [
            f"--input={corpus[0]}",
            f"--output={path}",
            "--model_type=bpe",
            "--vocab_size=1500",
            "--nodo_lower_case",
        ],
    )
    assert code == 0, err
    assert f"wrote {path}: 1500 entries" in out
    return str(path)


def prep(forkserver, corpus_path, vocab, out, *flags):
    code, _, err = forkserver.run(
        "data_prep.main",
        [
            f"--input={corpus_path}",
            f"--vocab_file={vocab}",
            f"--output_dir={out}",
            "--nsp=false",
            "--dupe_factor=1",
            "--eval_fraction=0.2",
            "--num_workers=1",
            "--noprogress",
            *flags,
        ],
        timeout=300,
    )
    assert code == 0, err
    return json.loads((out / "manifest.json").read_text())


def test_bpe_records_hold_the_librarys_ids_masked_at_30_percent_eval_at_15(
    forkserver, corpus, bpe, tmp_path
):
    corpus_path, docs = corpus
    manifest = prep(
        forkserver,
        corpus_path,
        bpe,
        tmp_path,
        "--max_seq_length=512",
        "--max_predictions_per_seq=160",
        "--masked_lm_prob=0.3",
        "--short_seq_prob=0",
        "--do_whole_word_mask",
    )
    library = tokenizers.Tokenizer.from_file(bpe)
    vocab = manifest["vocab"]
    assert vocab["kind"] == "tokenizer_json" and vocab["model"] == "BPE"
    assert vocab["special_tokens"]["mask"] == "[MASK]"
    assert vocab["special_ids"] == {
        role: library.token_to_id(token) for role, token in vocab["special_tokens"].items()
    }
    # Each document, as running text, is what its records hold: their ids unmasked and joined
    # are the library's ids of the document's sentences joined by spaces.
    whole = {tuple(library.encode(" ".join(d), add_special_tokens=False).ids) for d in docs}
    ids_of_docs = b"|".join(np.asarray(w, np.int32).tobytes() for w in whole)
    rates = {}
    for split in ("train", "eval"):
        masked = real = 0
        for r in records(tmp_path, split):
            n = int(r[F.INPUT_MASK].sum())
            ids = r[F.INPUT_IDS][:n].copy()
            k = r[F.MASKED_LM_WEIGHTS] > 0
            ids[r[F.MASKED_LM_POSITIONS][k]] = r[F.MASKED_LM_IDS][k]
            assert ids[0] == vocab["special_ids"]["cls"] and ids[-1] == vocab["special_ids"]["sep"]
            assert ids[1:-1].astype(np.int32).tobytes() in ids_of_docs
            masked, real = masked + int(k.sum()), real + n
        rates[split] = masked / real
    assert rates["train"] == pytest.approx(0.3, abs=0.01)
    assert rates["eval"] == pytest.approx(0.15, abs=0.01)
    assert manifest["eval"]["masked_lm_prob"] == 0.15
    assert manifest["stats"]["mask_rate"] == pytest.approx(0.3, abs=0.01)


def test_a_unigram_file_with_roberta_special_tokens(forkserver, corpus, tmp_path):
    unigram = tokenizer_files.make("unigram", tmp_path / "unigram.json")
    out = tmp_path / "records"
    manifest = prep(forkserver, corpus[0], unigram, out, "--dynamic_masking")
    assert manifest["vocab"]["special_tokens"] == {
        "cls": "<s>",
        "sep": "</s>",
        "mask": "<mask>",
        "pad": "<pad>",
        "unk": "<unk>",
    }
    library = tokenizers.Tokenizer.from_file(unigram)
    first = records(out, "train")[0]
    assert (
        first[F.INPUT_IDS][0]
        == library.token_to_id("<s>")
        == manifest["vocab"]["special_ids"]["cls"]
    )
    assert F.MASKED_LM_POSITIONS not in first  # unmasked: the trainer masks
