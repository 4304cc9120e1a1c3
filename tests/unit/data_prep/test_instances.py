"""The default path keeps the original's semantics: batch tokenization, instances, encoding
(masking: test_masking.py)."""

import random

import numpy as np
import pytest

from bert_jax.data.contract import features as F
from bert_jax.data.input import masking
from bert_jax.text import tokenization
from data_prep import instances as inst
from data_prep import readers, reference


@pytest.fixture(scope="module")
def corpus(testdata, tok):
    """pydocs_small as Documents (offsets) and as the reference's lists of sentence id lists."""
    docs = list(
        readers.documents(
            readers.Source("text", str(testdata / "pydocs_small.txt")), readers.ReadStats()
        )
    )
    ids, per_line = tok.encode_batch([line for doc in docs for line in doc])
    documents = inst.Documents.from_lines(ids, per_line, [len(doc) for doc in docs])
    as_lists = [
        [ids[b[j] : b[j + 1]].tolist() for j in range(len(b) - 1)] for b in documents.bounds
    ]
    return documents, as_lists


@pytest.mark.parametrize("lower", [True, False])
def test_encode_batch_equals_encode_and_tokenize(vocab_file, testdata, lower):
    tok = tokenization.WordPieceTokenizer(vocab_file, do_lower_case=lower)
    rng = random.Random(0)
    alphabet = "aZé中\u200b\u0301\x0b\x1c\x85\u2028\u00a0\ue000 ,.!-#\t\x01\x7f"
    alphabet += "".join(map(chr, range(0x370, 0x380)))
    odd = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(1500)]
    odd += [
        "\uffff",
        "a \uffff b",
        "",
        "a\x0bb c",
        "\x01\x02",
        "x" * 201,
        "don't-stop!!",
    ]  # markers, limits
    letters = "abcdefghijklmnopqrstuvwxyzQZ0123456789"
    odd += [
        " ".join("".join(rng.choice(letters) for _ in range(rng.randint(1, 25))) for _ in range(8))
        for _ in range(300)
    ]  # words that are no vocabulary entry: the greedy longest match
    lines = (testdata / "pydocs_small.txt").read_text(encoding="utf-8").splitlines()[:1500] + odd
    expected = [tok.convert_tokens_to_ids(tok.tokenize(line)) for line in lines]
    for batch, wanted in (
        (lines, expected),
        (lines[::-1], expected[::-1]),
        ([], []),
    ):  # cold, then warm cache
        ids, per_line = tok.encode_batch(batch)
        assert ids.dtype == np.int32 and per_line.tolist() == [len(e) for e in wanted]
        assert ids.tolist() == [i for e in wanted for i in e]
    assert [tok.encode(line) for line in lines] == expected


def test_nsp_structure_is_the_originals(corpus, tok, monkeypatch):
    # Truncation is the one step that draws differently (one binomial per segment instead of a coin
    # per token; the lengths are checked below). Given the same truncation draws, the spans consume
    # the random stream exactly as the original does and so must give the same instances.
    def same_draws(tokens_a, tokens_b, max_num_tokens, rng):
        lo_a, hi_a, lo_b, hi_b = inst._truncate(
            0, len(tokens_a), 0, len(tokens_b), max_num_tokens, rng
        )
        tokens_a[:], tokens_b[:] = tokens_a[lo_a:hi_a], tokens_b[lo_b:hi_b]

    monkeypatch.setattr(reference, "truncate_seq_pair", same_draws)
    documents, as_lists = corpus
    vocab = masking.Vocab.from_tokenizer(tok)
    opts = inst.InstanceOptions(mask=False, short_seq_prob=0.3)
    expected, ref_rng = [], random.Random(7)
    for index in range(len(as_lists)):
        expected += reference.create_instances_from_document(as_lists, index, opts, vocab, ref_rng)
    spans, rng = [], random.Random(7)
    for index in range(len(documents.bounds)):
        inst.nsp_spans(documents, index, opts, rng, spans)
    batch = inst.assemble(documents, spans, opts, vocab)
    ours = [
        (row[:n].tolist(), seg, bool(r))
        for row, n, seg, r in zip(
            batch.tokens, batch.length, batch.segment_start, batch.random_next
        )
    ]
    assert ours == [(x.tokens, x.segment_ids.index(1), x.is_random_next) for x in expected]
    assert len(ours) > 500


@pytest.mark.parametrize("length, short", [(64, 0.1), (3, 0.5), (4, 1.0)])
def test_mlm_only_packing_is_the_originals(corpus, tok, length, short):
    """At every length allowed: max_seq_length=3 leaves room for one token, and a short target
    (randint(2, 1)) raised ValueError in both modes."""
    documents, as_lists = corpus
    vocab = masking.Vocab.from_tokenizer(tok)
    opts = inst.InstanceOptions(max_seq_length=length, short_seq_prob=short, nsp=False, mask=False)
    expected, rng = [], random.Random(3)
    for index in range(len(as_lists)):
        expected += reference.create_instances_from_document(as_lists, index, opts, vocab, rng)
    spans, rng = [], random.Random(3)
    for index in range(len(documents.bounds)):
        inst.mlm_spans(documents, index, opts, rng, spans)
    batch = inst.assemble(documents, spans, opts, vocab)
    assert [row[:n].tolist() for row, n in zip(batch.tokens, batch.length)] == [
        x.tokens for x in expected
    ]
    assert (batch.segment_start == batch.length).all() and not batch.random_next.any()


@pytest.mark.parametrize("length, short", [(3, 0.0), (8, 0.0), (16, 0.5), (64, 0.0), (64, 0.3)])
def test_mlm_only_records_hold_every_token_of_their_document(corpus, tok, length, short):
    """A sentence that crosses the row's end, or a line longer than the row, goes on into the next
    record: the records of a document, read in order, are the document (the rest was dropped)."""
    documents, as_lists = corpus
    vocab = masking.Vocab.from_tokenizer(tok)
    opts = inst.InstanceOptions(max_seq_length=length, short_seq_prob=short, nsp=False, mask=False)
    rng = random.Random(5)
    for index, sentences in enumerate(as_lists):
        spans = []
        inst.mlm_spans(documents, index, opts, rng, spans)
        if not spans:
            assert not any(sentences)
            continue
        batch = inst.assemble(documents, spans, opts, vocab)
        rows = [row[1 : n - 1].tolist() for row, n in zip(batch.tokens, batch.length)]
        assert all(0 < len(r) <= length - 2 for r in rows)
        flat = lambda lists: [t for x in lists for t in x]
        assert flat(rows) == flat(sentences)


def test_truncation_lengths_match_the_original_and_ends_are_fair():
    rng = random.Random(0)
    for len_a in range(0, 12):
        for len_b in range(0, 12):
            for limit in range(1, 20):
                a, b = list(range(len_a)), list(range(100, 100 + len_b))
                reference.truncate_seq_pair(a, b, limit, random.Random(1))
                lo_a, hi_a, lo_b, hi_b = inst._truncate(0, len_a, 100, 100 + len_b, limit, rng)
                assert (hi_a - lo_a, hi_b - lo_b) == (len(a), len(b))
                assert 0 <= lo_a <= hi_a <= len_a and 100 <= lo_b <= hi_b <= 100 + len_b
    fronts = [inst._truncate(0, 300, 0, 10, 200, rng)[0] for _ in range(2000)]
    assert (
        abs(np.mean(fronts) - 55) < 1.5
    )  # 110 tokens leave A, half of them from the front on average


def _masked_batch(corpus, tok, opts, seed=0):
    documents, _ = corpus
    vocab = masking.Vocab.from_tokenizer(tok)
    spans, rng = [], random.Random(seed)
    for index in range(len(documents.bounds)):
        inst.nsp_spans(documents, index, opts, rng, spans)
    original = inst.assemble(documents, spans, opts, vocab)
    batch = inst.assemble(documents, spans, opts, vocab)
    inst.mask(batch, opts, vocab, np.random.default_rng(seed))
    return original, batch


@pytest.mark.parametrize("seq, preds, mask", [(128, 20, True), (512, 76, True), (64, 0, False)])
def test_encoder_bytes_equal_protobuf_deterministic_serialization(corpus, tok, seq, preds, mask):
    opts = inst.InstanceOptions(max_seq_length=seq, max_predictions_per_seq=max(preds, 1))
    unmasked, masked = _masked_batch(corpus, tok, opts)
    batch = masked if mask else unmasked
    schema = F.Schema(seq, preds)
    batch.tokens[0, 1] = 2**31 - 1  # a varint of five bytes
    records = inst.ExampleEncoder(schema).encode(batch)
    pb = F._example_pb2()
    for index in range(0, len(records), 13):
        assert (
            pb.Example.FromString(records[index]).SerializeToString(deterministic=True)
            == records[index]
        )
        features = F.decode_example(records[index])
        # Reference mode's protobuf path writes the same bytes, in every process (map order).
        assert F.encode_example(features) == records[index]
        F.check_example(features, schema)
        n = int(batch.length[index])
        assert features[F.INPUT_IDS].tolist() == batch.tokens[index].tolist()
        assert (
            features[F.INPUT_MASK].sum() == n
            and features[F.SEGMENT_IDS][batch.segment_start[index] : n].all()
        )
        if mask:
            assert features[F.MASKED_LM_WEIGHTS].sum() == batch.num_masked[index]
