"""The reference generator (data_prep/reference.py): truncation, masking proportions, whole words,
MLM-only and unmasked modes."""

import collections
import dataclasses
import os
import random

import pytest

from bert_jax.data.input import masking
from data_prep import inputs, instances, reference
from data_prep.lines import text_documents
from support import tokenizer_files


@pytest.fixture(scope="module")
def vocab(tok):
    return masking.Vocab.from_tokenizer(tok)


@pytest.fixture(scope="module")
def documents(tok, testdata):
    from data_prep import readers

    stats = readers.ReadStats()
    lines = inputs.read_lines(str(testdata / "pydocs_small.txt"), stats)
    return [reference.tokenize_document(d, tok) for d in text_documents(lines, stats)][:40]


def _all_instances(documents, opts, vocab, seed=0):
    rng = random.Random(seed)
    return [
        i
        for d in range(len(documents))
        for i in reference.create_instances_from_document(documents, d, opts, vocab, rng)
    ]


def test_truncate_seq_pair_trims_the_longer_side_from_both_ends():
    rng = random.Random(0)
    a, b = list(range(100)), list(range(1000, 1010))
    reference.truncate_seq_pair(a, b, 50, rng)
    assert len(a) + len(b) == 50 and len(b) == 10
    assert a[0] > 0 and a[-1] < 99  # both ends were trimmed at some point
    assert a == list(range(a[0], a[0] + len(a)))  # only the ends: what stays is contiguous


def test_masking_rules(documents, vocab):
    opts = instances.InstanceOptions()
    found = _all_instances(documents, opts, vocab)
    assert len(found) > 100
    kinds = collections.Counter()
    for instance in found:
        n = len(instance.tokens)
        assert n <= opts.max_seq_length
        assert instance.masked_lm_positions == sorted(instance.masked_lm_positions)
        assert len(instance.masked_lm_positions) == min(20, max(1, round(n * 0.15)))
        for pos, label in zip(instance.masked_lm_positions, instance.masked_lm_labels):
            assert label not in (vocab.cls_id, vocab.sep_id)  # [CLS]/[SEP] never masked
            now = instance.tokens[pos]
            kinds["mask" if now == vocab.mask_id else "kept" if now == label else "random"] += 1
        assert instance.tokens[0] == vocab.cls_id and instance.tokens[-1] == vocab.sep_id
        sep = instance.segment_ids.index(1) - 1
        assert instance.tokens[sep] == vocab.sep_id
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02
    assert abs(kinds["kept"] / total - 0.1) < 0.02
    assert abs(kinds["random"] / total - 0.1) < 0.02
    random_next = sum(i.is_random_next for i in found) / len(found)
    # 50% plus the chunks of one sentence, whose B must be random (many in this corpus).
    assert 0.45 < random_next < 0.9


def test_whole_word_masking_masks_every_piece_of_a_word(documents, vocab, tok):
    opts = instances.InstanceOptions(whole_word_mask=True)
    words_seen = 0
    for instance in _all_instances(documents, opts, vocab):
        original = list(instance.tokens)
        for pos, label in zip(instance.masked_lm_positions, instance.masked_lm_labels):
            original[pos] = label
        masked = set(instance.masked_lm_positions)
        for pos in masked:
            # the pieces around a masked piece that belong to the same word are masked too
            if pos + 1 < len(original) and original[pos + 1] in vocab.continuation:
                assert pos + 1 in masked
                words_seen += 1
            if original[pos] in vocab.continuation:
                # As the original, [CLS]/[SEP] are skipped when grouping, so the word continues at
                # the previous ordinary token; a piece right after [CLS] starts a group of its own.
                prev = pos - 1
                while original[prev] in (vocab.cls_id, vocab.sep_id) and prev > 0:
                    prev -= 1
                assert prev == 0 or prev in masked
    assert words_seen > 20


def test_any_mask_rate(documents, vocab):
    opts = instances.InstanceOptions(masked_lm_prob=0.4, max_predictions_per_seq=128)
    found = _all_instances(documents, opts, vocab)
    rate = sum(len(i.masked_lm_positions) for i in found) / sum(len(i.tokens) for i in found)
    assert abs(rate - 0.4) < 0.01


def test_mlm_only_fills_one_full_length_segment(documents, vocab):
    opts = instances.InstanceOptions(nsp=False, short_seq_prob=0.0)
    found = _all_instances(documents, opts, vocab)
    assert all(set(i.segment_ids) == {0} and not i.is_random_next for i in found)
    assert all(i.tokens.count(vocab.sep_id) == 1 for i in found)
    lengths = [len(i.tokens) for i in found]
    assert max(lengths) == opts.max_seq_length
    # Only each document's last chunk may be short.
    assert sum(n == opts.max_seq_length for n in lengths) > len(found) / 2


def test_unmasked_instances_keep_the_text(documents, vocab):
    found = _all_instances(documents, instances.InstanceOptions(mask=False), vocab)
    assert all(not i.masked_lm_positions and vocab.mask_id not in i.tokens for i in found)


def test_long_lines_are_truncated_not_rejected(vocab):
    documents = [[list(range(2000, 3000))], [list(range(3000, 3100)), list(range(4000, 4050))]]
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    found = _all_instances(documents, opts, vocab)
    assert found and all(len(i.tokens) <= 64 for i in found)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(max_seq_length=4),
        dict(masked_lm_prob=0.0),
        dict(masked_lm_prob=1.5),
        dict(max_predictions_per_seq=0),
        dict(short_seq_prob=-1),
    ],
)
def test_bad_options_are_rejected(kwargs):
    with pytest.raises(ValueError):
        instances.InstanceOptions(**kwargs)


def _records(directory):
    import glob

    from bert_jax.data.contract import features as F
    from bert_jax.data.contract import record_io

    return collections.Counter(
        tuple(F.decode_example(r)["input_ids"].tolist())
        for path in sorted(glob.glob(f"{directory}/*.tfrecord"))
        for r in record_io.read_records(path)
    )


@pytest.mark.parametrize("kind", ["wordpiece.txt", *tokenizer_files.KINDS])
def test_reference_and_scaled_mode_encode_documents_alike(tmp_path, testdata, vocab_file, kind):
    """Unmasked MLM-only records filled to full length (no random choice shapes them) are the
    same in both modes, for every kind of vocabulary: reference mode, too, encodes a
    tokenizer.json's later sentences with the space running text has before them (a byte-level
    BPE's "ĠNext", not "Next")."""
    from bert_jax.text import tokenization
    from data_prep import job, scaled

    if kind == "wordpiece.txt":
        tok = tokenization.make_tokenizer(vocab_file)
    else:
        tok = tokenization.make_tokenizer(tokenizer_files.make(kind, tmp_path / f"{kind}.json"))
    opts = instances.InstanceOptions(max_seq_length=32, short_seq_prob=0, nsp=False, mask=False)
    corpus = [str(testdata / "sample_text.txt")]
    reference.run(
        corpus,
        tok,
        opts,
        dupe_factor=1,
        seed=1,
        output_dir=str(tmp_path / "ref"),
        fmt="tfrecord",
        flags={},
    )
    spec = job.JobSpec(
        inputs=tuple(corpus), opts=opts, dupe_factor=1, eval_fraction=0, fmt="tfrecord"
    )
    scaled.run(spec, tok, str(tmp_path / "scaled"), progress=False)
    want = _records(tmp_path / "scaled")
    assert sum(want.values()) >= 20 and _records(tmp_path / "ref") == want


@pytest.mark.parametrize("kind", tokenizer_files.KINDS)
def test_whole_word_masking_takes_the_words_masking_takes(tmp_path, testdata, kind):
    """Reference mode's whole words are masking.Vocab.continues' (the scaled mode's and the
    trainer's): for a byte-level BPE a piece joins the word before it only when the character
    kinds allow it ("ĠðĲĢ", a space and the start of a character, starts a word): masked pieces
    are whole words of that rule, and supplementary-plane text is not one unmaskable word."""
    import numpy as np

    from bert_jax.text import tokenization

    tok = tokenization.make_tokenizer(tokenizer_files.make(kind, tmp_path / f"{kind}.json"))
    vocab = masking.Vocab.from_tokenizer(tok)
    rng = random.Random(3)
    planes = [chr(rng.randrange(0x10000, 0x10400)) for _ in range(64)]
    text = testdata.joinpath("sample_text.txt").read_text(encoding="utf-8").split("\n")[:12]
    lines = text + [" ".join(rng.choice(planes) for _ in range(20)) for _ in range(6)]
    lines = [line for line in lines if line.strip()]
    documents = [reference.tokenize_document(lines[i : i + 6], tok) for i in range(0, 18, 6)]
    opts = instances.InstanceOptions(max_seq_length=48, max_predictions_per_seq=8)
    opts = dataclasses.replace(opts, whole_word_mask=True)
    for instance in _all_instances(documents, opts, vocab, seed=1):
        original = np.array(instance.tokens)
        original[instance.masked_lm_positions] = instance.masked_lm_labels
        starts = ~vocab.continues(original[None])[0]
        special = (original == vocab.cls_id) | (original == vocab.sep_id)
        word, words = -1, []  # word number per position; [CLS]/[SEP] are in none
        for is_start, is_special in zip(starts, special):
            word += bool(is_start and not is_special) or word < 0
            words.append(-1 if is_special else word)
        words = np.array(words)
        chosen = np.zeros(len(original), bool)
        chosen[instance.masked_lm_positions] = True
        for w in set(words[chosen].tolist()):
            assert chosen[words == w].all(), (kind, original, instance.masked_lm_positions)
        # Words are a few pieces each, the budget 7: every instance has one to mask.
        assert chosen.any(), (kind, original)


def test_an_input_without_instances_is_an_error_as_in_scaled_mode(tmp_path, tok):
    """Blank lines only: reference mode wrote an empty shard and a manifest and exited 0, where
    scaled mode says the input gave no instances; a finished output there is kept."""
    from bert_jax import cli
    from bert_jax.data.contract import manifest

    (tmp_path / "blank.txt").write_text("\n \n\t\n")
    opts = instances.InstanceOptions(max_seq_length=32)
    out = tmp_path / "out"
    with pytest.raises(cli.UserError, match=r"no training instances \(0 documents.*blank.txt"):
        reference.run(
            [str(tmp_path / "blank.txt")], tok, opts, dupe_factor=1, seed=1,
            output_dir=str(out), fmt="tfrecord", flags={},
        )  # fmt: skip
    assert not (out / manifest.FILE).exists()


def test_an_output_dir_of_another_mode_is_refused_and_a_rerun_leaves_no_stale_shard(
    tmp_path, testdata, tok
):
    """Reference mode wrote its shard and manifest into a finished (or unfinished) scaled
    output: the scaled job's manifest was lost and its shards stayed beside the new one, for a
    glob to read. Scaled mode refuses the reverse. A reference rerun in another format leaves
    only the new shard."""
    from bert_jax import cli
    from bert_jax.data.contract import manifest
    from data_prep import job, scaled

    corpus = [str(testdata / "sample_text.txt")]
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    spec = job.JobSpec(inputs=tuple(corpus), opts=opts, dupe_factor=1, num_shards=2)
    scaled.run(spec, tok, str(tmp_path / "scaled"), progress=False)
    before = sorted(os.listdir(tmp_path / "scaled"))
    (tmp_path / "unfinished" / manifest.WORK_DIR).mkdir(parents=True)
    for name in ("scaled", "unfinished"):
        with pytest.raises(cli.UserError, match=rf"--output_dir=.*{name}' holds .*--mode=scaled"):
            reference.run(
                corpus, tok, opts, dupe_factor=1, seed=1,
                output_dir=str(tmp_path / name), fmt="tfrecord", flags={},
            )  # fmt: skip
    assert sorted(os.listdir(tmp_path / "scaled")) == before
    for fmt in ("tfrecord", "arrayrecord"):
        reference.run(
            corpus, tok, opts, dupe_factor=1, seed=1,
            output_dir=str(tmp_path / "ref"), fmt=fmt, flags={},
        )  # fmt: skip
    assert sorted(os.listdir(tmp_path / "ref")) == [
        manifest.FILE,
        "train-00000-of-00001.arrayrecord",
    ]


def test_a_rerun_whose_input_glob_matches_its_own_output_skips_it(tmp_path, testdata, tok):
    """As scaled mode: --input='corpus/*' --output_dir=corpus read the first run's shard and
    manifest as input on the rerun (an error: "holds NUL bytes")."""
    import shutil

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(testdata / "sample_text.txt", corpus / "a.txt")
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    runs = [
        reference.run(
            [str(corpus / "*")], tok, opts, dupe_factor=1, seed=1,
            output_dir=str(corpus), fmt="tfrecord", flags={},
        )["shards"]
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0] == runs[1]


def test_whole_word_masking_with_a_vocabulary_that_marks_no_words_is_refused(tmp_path, testdata):
    """Scaled and Beam mode refuse it; reference mode masked piece by piece and wrote
    whole_word_mask: true in its manifest."""
    from bert_jax import cli
    from bert_jax.text import tokenization

    tok = tokenization.make_tokenizer(tokenizer_files.make("plain", tmp_path / "plain.json"))
    opts = instances.InstanceOptions(max_seq_length=64, whole_word_mask=True)
    with pytest.raises(cli.UserError, match="whole-word masking needs word boundaries"):
        reference.run(
            [str(testdata / "sample_text.txt")], tok, opts, dupe_factor=1, seed=1,
            output_dir=str(tmp_path / "out"), fmt="tfrecord", flags={},
        )  # fmt: skip
    unmasked = dataclasses.replace(opts, mask=False)  # dynamic masking: the trainer's concern
    reference.run(
        [str(testdata / "sample_text.txt")], tok, unmasked, dupe_factor=1, seed=1,
        output_dir=str(tmp_path / "out"), fmt="tfrecord", flags={},
    )  # fmt: skip


def test_a_rerun_removes_a_killed_jobs_temporary_shard_and_a_second_job_is_refused(
    tmp_path, testdata, tok
):
    """A reference job killed as it wrote its shard left train-...tfrecord.tmp-PID, which the
    rerun kept beside the finished output (random kill -9s: 5 of 14); and no lock kept a second
    job out of the directory while one ran (scaled and Beam jobs are refused there)."""
    from bert_jax.storage import workdir_lock

    out = tmp_path / "out"
    opts = instances.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)

    def run():
        return reference.run(
            [str(testdata / "sample_text.txt")], tok, opts, dupe_factor=1, seed=1,
            output_dir=str(out), fmt="tfrecord", flags={},
        )  # fmt: skip

    clean = run()
    shard = out / clean["shards"]["train"][0]["file"]
    killed = f"{shard}.tmp-{2**22 + 7}"  # a pid no process has
    with open(killed, "wb") as f:
        f.write(shard.read_bytes()[:100])
    (out / "manifest.json").unlink()  # killed before its manifest
    assert run()["shards"] == clean["shards"]
    assert sorted(os.listdir(out)) == ["manifest.json", shard.name]
    with workdir_lock.hold(str(out), "data_prep.main", flag="--output_dir"):
        with pytest.raises(workdir_lock.Busy, match=r"is in use by data_prep\.main"):
            run()


def _original_truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    """google-research/bert's truncate_seq_pair, verbatim."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc_tokens) >= 1
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def test_truncate_seq_pair_is_the_originals_in_linear_time():
    """The same pieces and the same random stream as the original's on generated pairs; and a
    line of a million tokens is cut at once (the original's `del tokens[0]` per token took a
    minute per instance of it, here in reference mode too; 10 s is room for a loaded machine)."""
    import time

    cases = random.Random(0)
    for _ in range(3000):
        len_a, len_b = cases.randint(0, 300), cases.randint(0, 300)
        limit, seed = cases.randint(1, 300), cases.randrange(1 << 30)
        pairs = [(list(range(len_a)), list(range(1000, 1000 + len_b))) for _ in range(2)]
        rngs = [random.Random(seed), random.Random(seed)]
        reference.truncate_seq_pair(*pairs[0], limit, rngs[0])
        _original_truncate_seq_pair(*pairs[1], limit, rngs[1])
        assert pairs[0] == pairs[1] and rngs[0].random() == rngs[1].random()
    a, b = list(range(1_000_000)), [1, 2]
    start = time.perf_counter()
    reference.truncate_seq_pair(a, b, 125, random.Random(0))
    assert time.perf_counter() - start < 10 and len(a) + len(b) == 125
