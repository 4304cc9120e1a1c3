"""bert_jax.data.input.masking, the one masking rule, in both of its uses: data_prep's static masks
(masking.mask over chunks of rows) and the trainer's dynamic masking (numbers drawn per record,
applied per batch, through the input pipeline). Both follow google-research/bert's rule, which
data_prep/reference.py keeps as the specification: rate and budget, 80/10/10, [CLS]/[SEP] and
padding never masked, whole words kept whole."""

import collections
import random

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.input import masking
from bert_jax.data.input import pipeline as ip
from configs import default
from data_prep import instances as inst
from data_prep import readers, reference

VOCAB_SIZE = 30522


@pytest.fixture(scope="module")
def vocab(tok):
    return masking.Vocab.from_tokenizer(tok)


@pytest.fixture(scope="module")
def rows(testdata, tok, vocab):
    """Unmasked [CLS] A [SEP] B [SEP] rows of pydocs_small as data_prep assembles them: [N, L]
    tokens and [N] lengths."""
    docs = list(
        readers.documents(
            readers.Source("text", str(testdata / "pydocs_small.txt")), readers.ReadStats()
        )
    )
    ids, per_line = tok.encode_batch([line for doc in docs for line in doc])
    documents = inst.Documents.from_lines(ids, per_line, [len(doc) for doc in docs])
    spans, rng = [], random.Random(0)
    for index in range(len(documents.bounds)):
        inst.nsp_spans(documents, index, inst.InstanceOptions(), rng, spans)
    batch = inst.assemble(documents, spans, inst.InstanceOptions(), vocab)
    return batch.tokens, batch.length


def per_record(tokens, lengths, opts, vocab, seed=0):
    """The trainer's way: each row's numbers from a generator of its own, then one apply."""
    length_cap = tokens.shape[1]
    draws = [
        masking.draw(np.random.default_rng([seed, i]), 1, length_cap, opts, vocab)
        for i in range(len(tokens))
    ]
    stacked = masking.Draws(
        *(np.concatenate([getattr(d, f) for d in draws]) for f in ("keys", "choice", "random"))
    )
    return masking.apply(tokens, lengths, opts, vocab, stacked)


def check_masks(before, lengths, out, opts, vocab) -> collections.Counter:
    """Asserts the rule on every row; returns how the chosen tokens were replaced."""
    specials = (vocab.cls_id, vocab.sep_id)
    kinds = collections.Counter()
    for i in range(len(before)):
        row, n, m = before[i], int(lengths[i]), int(out.num_masked[i])
        positions = out.positions[i, :m].tolist()
        assert positions == sorted(set(positions)), i
        assert not out.positions[i, m:].any() and not out.labels[i, m:].any()
        assert all(p < n and row[p] not in specials for p in positions), i  # never pad/CLS/SEP
        candidates = sum(1 for t in row[:n] if t not in specials)
        budget = min(opts.max_predictions_per_seq, max(1, round(n * opts.masked_lm_prob)))
        budget = min(budget, candidates)
        assert m <= budget if opts.whole_word_mask else m == budget, (
            i
        )  # whole-word masking skips big words
        assert out.labels[i, :m].tolist() == [row[p] for p in positions]
        untouched = np.ones(len(row), bool)
        untouched[positions] = False
        assert (out.tokens[i][untouched] == row[untouched]).all()
        kinds.update(
            "mask"
            if out.tokens[i][p] == vocab.mask_id
            else "kept"
            if out.tokens[i][p] == row[p]
            # a random entry may be the token itself: counted as kept (1 in 30522)
            else "random"
            for p in positions
        )
        if opts.whole_word_mask:  # no masked piece next to an unmasked piece of its word
            chosen = set(positions)
            for p in range(1, n - 1):
                if row[p + 1] in vocab.continuation and row[p] not in specials:
                    assert (p in chosen) == (p + 1 in chosen), (i, p)
    return kinds


def assert_80_10_10(kinds, tolerance=0.02):
    total = sum(kinds.values())
    assert total > 2000
    assert kinds["mask"] / total == pytest.approx(0.8, abs=tolerance)
    assert kinds["kept"] / total == pytest.approx(0.1, abs=tolerance)
    assert kinds["random"] / total == pytest.approx(0.1, abs=tolerance)


@pytest.mark.parametrize("use", ["data_prep", "trainer"])
@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_the_rule_holds_in_both_uses(rows, vocab, use, whole_word_mask):
    tokens, lengths = rows[0][:400], rows[1][:400]
    opts = masking.Options(whole_word_mask=whole_word_mask)
    if use == "data_prep":
        out = masking.mask(tokens, lengths, opts, vocab, np.random.default_rng(0))
    else:
        out = per_record(tokens, lengths, opts, vocab)
    assert (tokens == rows[0][:400]).all()  # the input is left as it is
    assert_80_10_10(check_masks(tokens, lengths, out, opts, vocab))
    np.testing.assert_array_equal(out.weights() > 0, np.arange(20) < out.num_masked[:, None])


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_masked_counts_match_the_reference(rows, vocab, whole_word_mask):
    # Differential: the reference's create_masked_lm_predictions on the same rows. Without
    # whole words the count is a function of the row; with them it depends on which words come
    # first, so the averages are compared.
    tokens, lengths = rows
    opts = inst.InstanceOptions(whole_word_mask=whole_word_mask)
    rng = random.Random(0)
    theirs = np.array(
        [
            len(reference.create_masked_lm_predictions(row[:n].tolist(), opts, vocab, rng)[1])
            for row, n in zip(tokens, lengths)
        ]
    )
    ours = masking.mask(tokens, lengths, opts.masking, vocab, np.random.default_rng(0)).num_masked
    if whole_word_mask:
        budget = masking.mask(tokens, lengths, masking.Options(), vocab, np.random.default_rng(0))
        short_ours, short_theirs = ours < budget.num_masked, theirs < budget.num_masked
        assert short_ours.mean() == pytest.approx(short_theirs.mean(), abs=0.02)
        assert ours.mean() == pytest.approx(theirs.mean(), rel=0.01)
    else:
        np.testing.assert_array_equal(ours, theirs)


def test_random_replacements_come_from_every_vocabulary_entry():
    entries = list(range(200, 260))  # the ids a vocabulary has; others never appear
    vocab = masking.Vocab(1, 2, 3, entries, frozenset())
    tokens = np.full((400, 64), 100, np.int32)
    tokens[:, 0], tokens[:, -1] = 1, 2
    out = masking.mask(
        tokens, np.full(400, 64), masking.Options(64, 1.0), vocab, np.random.default_rng(1)
    )
    replaced = out.tokens[(out.tokens != 100) & (out.tokens != 3)]
    assert set(replaced.tolist()) - {1, 2} == set(entries)


@pytest.fixture(scope="module")
def unmasked(testdata, tmp_path_factory, unmask_records):
    """600 golden pydocs records (with "##" pieces) with their masks undone."""
    golden = testdata / "pydocs_small.L128.P20.dupe2.tfrecord"
    return unmask_records(golden, tmp_path_factory.mktemp("unmasked") / "u.arrayrecord", 600)


def dynamic(files, **kw):
    """config.data for unmasked records without a manifest: their facts set by hand."""
    d = default.get_config().data
    facts = dict(max_seq_length=128, max_predictions_per_seq=20, nsp=True)
    facts.update(cls_token_id=101, sep_token_id=102, mask_token_id=103)
    d.update(train_files=files, dynamic_masking=True, read_threads=1, **facts)
    d.update(kw)
    return d


def unmask_batch(batch):
    """(the batch's rows before masking, their lengths, the masks as a masking.Masked)."""
    ids, positions, labels = (
        batch[F.INPUT_IDS],
        batch[F.MASKED_LM_POSITIONS],
        batch[F.MASKED_LM_IDS],
    )
    num = batch[F.MASKED_LM_WEIGHTS].sum(axis=1).astype(int)
    before = ids.copy()
    for i, m in enumerate(num):
        before[i, positions[i, :m]] = labels[i, :m]
    return before, batch[F.INPUT_MASK].sum(axis=1), masking.Masked(ids, positions, labels, num)


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_the_trainers_dynamic_masking_follows_the_rule(
    unmasked, vocab_file, vocab, whole_word_mask
):
    config = dynamic(unmasked, whole_word_mask=whole_word_mask, vocab_file=vocab_file)
    batches = iter(ip.train_dataset(config, VOCAB_SIZE, 64, seed=0))
    kinds = collections.Counter()
    masks_seen = collections.defaultdict(list)
    opts = masking.Options(whole_word_mask=whole_word_mask)
    for _ in range(12):  # 768 rows: more than an epoch
        before, lengths, out = unmask_batch(next(batches))
        kinds += check_masks(before, lengths, out, opts, vocab)
        for row, positions in zip(before, out.positions):
            masks_seen[row.tobytes()].append(positions.tobytes())
    assert_80_10_10(kinds, tolerance=0.03)
    # A record is masked anew each epoch: records read more than once show other masks.
    again = [len(set(masks)) > 1 for masks in masks_seen.values() if len(masks) > 1]
    assert len(again) > 100 and np.mean(again) > 0.9


def test_dynamic_masking_is_the_same_for_any_number_of_processes(unmasked, vocab_file):
    config = dynamic(unmasked, whole_word_mask=True, vocab_file=vocab_file)

    def take(**kw):
        it = iter(ip.train_dataset(config, VOCAB_SIZE, 16, seed=0, **kw))
        return [next(it) for _ in range(3)]

    single = take()
    parts = [take(process_index=p, process_count=2) for p in (0, 1)]
    for step in range(3):
        for name in single[step]:
            for p in (0, 1):
                np.testing.assert_array_equal(single[step][name][p::2], parts[p][step][name])


def test_random_replacements_follow_the_vocabulary_file(unmasked, vocab_file):
    # A model whose embedding table is larger than the vocabulary (padded): replacements are
    # drawn from the vocabulary's entries, as data_prep draws them, never from the padding.
    def replacements(config):
        ids = []
        batches = iter(ip.train_dataset(config, 40000, 64, seed=0))
        for _ in range(10):
            before, _, out = unmask_batch(next(batches))
            for i, m in enumerate(out.num_masked):
                p = out.positions[i, :m]
                now = out.tokens[i, p]
                ids += now[(now != before[i, p]) & (now != 103)].tolist()
        return np.array(ids)

    assert (replacements(dynamic(unmasked, vocab_file=vocab_file)) < VOCAB_SIZE).all()
    assert (replacements(dynamic(unmasked)) >= VOCAB_SIZE).any()  # without it: 0..40000


def test_whole_word_masking_needs_the_vocabulary(unmasked):
    with pytest.raises(ValueError, match=r"config\.data\.vocab_file"):
        ip.train_dataset(dynamic(unmasked, whole_word_mask=True), VOCAB_SIZE, 8, seed=0)


def test_the_vocabulary_file_is_read_once_while_it_stays_the_same(
    unmasked, vocab_file, tmp_path, monkeypatch
):
    # A run asks for the masking vocabulary three times (config check, train input, eval input).
    from bert_jax.text import tokenization

    reads = []
    real = tokenization.make_tokenizer
    monkeypatch.setattr(
        tokenization, "make_tokenizer", lambda path, *a: reads.append(path) or real(path, *a)
    )
    own = tmp_path / "vocab.txt"
    own.write_bytes(open(vocab_file, "rb").read())
    config = dynamic(unmasked, whole_word_mask=True, vocab_file=str(own))
    ip.train_dataset(config, VOCAB_SIZE, 8, seed=0)
    ip.eval_batches(config, unmasked, VOCAB_SIZE, 8, 8, seed=0)
    first = masking.Vocab.from_file(str(own))
    assert reads == [str(own)]
    # Rewritten (one more entry): read again, and the new entry is a replacement candidate.
    own.write_text(own.read_text() + "zzznewpiece\n")
    again = masking.Vocab.from_file(str(own))
    assert reads == [str(own)] * 2
    assert len(again.random_ids) == len(first.random_ids) + 1


def test_byte_level_words_of_characters_split_into_single_bytes(tmp_path):
    """Byte-level BPE splits a character it has no merge for into one piece a byte: a CJK
    character into 3, an emoji into 4. Such words are masked whole as the pre-tokenizer makes
    them; the continuation bytes' kind reached back 1 piece only, so whole-word masking cut CJK
    and emoji words at every character."""
    import tokenizers

    from bert_jax.text import tokenization
    from support import tokenizer_files

    path = tokenizer_files.make("bpe", tmp_path / "bpe.json", vocab_size=400)
    tok = tokenization.make_tokenizer(path)
    vocab = masking.Vocab.from_tokenizer(tok)
    library = tokenizers.Tokenizer.from_file(path)
    rng = np.random.default_rng(0)
    scripts = [(0x4E00, 0x9FFF), (0x1F600, 0x1F64F), (0xAC00, 0xD7A3), (0x0430, 0x044F)]
    for _ in range(100):
        words = []
        for _ in range(rng.integers(1, 6)):
            lo, hi = scripts[rng.integers(len(scripts))]
            words.append("".join(chr(c) for c in rng.integers(lo, hi + 1, rng.integers(1, 5))))
        encoding = library.encode(" ".join(words), add_special_tokens=False)
        ids = np.asarray([[tok.cls_id, *encoding.ids, tok.sep_id]])
        ours = ~vocab.continues(ids)[0, 2:-1]
        theirs = np.diff(np.asarray(encoding.word_ids)) != 0
        assert (ours == theirs).all(), (words, encoding.tokens)
