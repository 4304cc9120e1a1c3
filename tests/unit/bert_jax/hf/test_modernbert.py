"""ModernBERT in and out: parity with a random transformers ModernBertForMaskedLM both ways, on
padded and packed rows, with sliding windows that bite (rows longer than the window); its
directories read by pre-training, fine-tuning's --init and embed; tokenizer files passed through."""

import dataclasses
import itertools
import json
import os

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from bert_jax import cli, embed
from bert_jax.finetune import runs
from bert_jax.hf import bert as hf
from bert_jax.model import encoder as M
from bert_jax.training import pretrained
from support import tiny
from support.finetune_data import VOCAB, make_config, sst2_file

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Four layers: global, sliding, sliding, global. A window of 8 (4 either side) in 40-token rows.
SHAPE = dict(
    vocab_size=len(VOCAB),
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=2,
    max_position_embeddings=64,
    local_attention=8,
)
LENGTH = 40
BERT_REST = dict(
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=64,
    type_vocab_size=2,
    initializer_range=0.02,
)


def hf_model(seed=0, **changes):
    """A random ModernBertForMaskedLM (eager attention, the reference math) with noise on every
    weight, so unit norms and zero biases cannot hide a mix-up."""
    torch.manual_seed(seed)
    config = transformers.ModernBertConfig(
        **{**SHAPE, **changes},
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
        attn_implementation="eager",
    )
    model = transformers.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def their_logits(model, ids, mask=None):
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=None if mask is None else torch.tensor(mask, dtype=torch.long),
        )
    return out.logits.numpy()


@nnx.jit
def _forward(model, ids, mask, positions, packed):
    return model(ids, mask, ids * 0, positions, **packed)[0]


def our_logits(model, ids, mask, **packed):
    """Logits at every position of every row (the MLM head gathers them all)."""
    positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
    return np.asarray(_forward(model, ids, mask, positions, packed))


def padded_batch(seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.array([LENGTH, 29, 11])  # longer and shorter than the window
    mask = (np.arange(LENGTH)[None] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(5, len(VOCAB), (3, LENGTH)).astype(np.int32) * mask
    return ids, mask


def packed_rows(seed=1):
    """Two rows of documents (lengths 14 + 17 + padding, 25 + 11 + padding) and the documents."""
    rng = np.random.default_rng(seed)
    docs = [[14, 17], [25, 11]]
    ids = np.zeros((2, LENGTH), np.int32)
    example = np.zeros((2, LENGTH), np.int32)
    position = np.zeros((2, LENGTH), np.int32)
    cls = np.zeros((2, 2), np.int32)
    pieces = []
    for r, lengths in enumerate(docs):
        at = 0
        for e, n in enumerate(lengths):
            doc = rng.integers(5, len(VOCAB), n).astype(np.int32)
            ids[r, at : at + n] = doc
            example[r, at : at + n] = e + 1
            position[r, at : at + n] = np.arange(n)
            cls[r, e] = at
            pieces.append((r, at, doc))
            at += n
    packed = dict(example_ids=example, position_ids=position, cls_positions=cls)
    return ids, (example > 0).astype(np.int32), packed, pieces


def assert_parity(ours, theirs):
    ids, mask = padded_batch()
    ref = their_logits(theirs, ids, mask)
    got = our_logits(ours, ids, mask)
    for row, n in enumerate(mask.sum(1)):
        np.testing.assert_allclose(got[row, :n], ref[row, :n], atol=1e-4, rtol=0)
    # Packed rows against each document run alone by transformers.
    ids, mask, packed, pieces = packed_rows()
    got = our_logits(ours, ids, mask, **packed)
    for row, at, doc in pieces:
        ref = their_logits(theirs, doc[None])[0]
        np.testing.assert_allclose(got[row, at : at + len(doc)], ref, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    model = hf_model()
    path = tmp_path_factory.mktemp("modernbert")
    model.save_pretrained(str(path))
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(path), model


def test_import_matches_transformers_padded_and_packed(hf_dir):
    path, theirs = hf_dir
    ours, report = hf.load_hf(path)
    assert report.initialized == [] and report.unused == []
    cfg = ours.config
    assert (cfg.position_embedding_type, cfg.norm_position, cfg.mlp_type) == (
        "rope",
        "pre",
        "geglu",
    )
    assert [cfg.attention_window(i) for i in range(4)] == [None, 4, 4, None]
    assert hf.architecture(cfg) == hf.MODERNBERT
    assert_parity(ours, theirs)
    # The window bites: full attention everywhere gives other logits.
    ids, mask = padded_batch()
    full = M.model_from_params(
        dataclasses.replace(cfg, local_attention=0),
        nnx.to_pure_dict(nnx.state(ours, nnx.Param)),
    )
    assert np.abs(our_logits(full, ids, mask) - our_logits(ours, ids, mask)).max() > 1e-2


def test_export_loads_in_transformers_and_matches(tmp_path):
    theirs = hf_model(seed=3, norm_bias=True, attention_bias=True, mlp_bias=True)
    theirs.save_pretrained(str(tmp_path / "theirs"))
    ours, _ = hf.load_hf(str(tmp_path / "theirs"))
    for i in range(ours.config.num_hidden_layers):  # biases on: concatenated parts too
        assert ours.bert.layers[i].gate.bias is not None
    out = str(tmp_path / "export")
    hf.save_hf(ours, None, out, special_ids={"pad": 0, "cls": 2, "sep": 3})
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        out, attn_implementation="eager", output_loading_info=True
    )
    assert type(loaded).__name__ == "ModernBertForMaskedLM"
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    assert loaded.config.layer_types == theirs.config.layer_types
    assert loaded.config.pad_token_id == 0 and loaded.config.cls_token_id == 2
    assert_parity(ours, loaded.eval())
    again, _ = hf.load_hf(out)  # export, then import: the same numbers
    for a, b in zip(
        jax.tree.leaves(nnx.state(ours, nnx.Param)), jax.tree.leaves(nnx.state(again, nnx.Param))
    ):
        np.testing.assert_array_equal(a, b)


def test_configs_round_trip_and_read_transformers_4s_spelling():
    cfg = hf.bert_config_from_hf(hf_model().config.to_dict())
    written = hf.hf_config_from_bert(cfg)
    assert hf.bert_config_from_hf(written) == cfg
    theirs = transformers.ModernBertConfig(**written)
    assert (theirs.classifier_pooling, theirs.classifier_dropout) == ("cls", 0.0)
    mean = hf.bert_config_from_hf(
        written | {"classifier_pooling": "mean", "classifier_dropout": 0.2}
    )
    assert hf.hf_config_from_bert(mean) == written | {
        "classifier_pooling": "mean",
        "classifier_dropout": 0.2,
    }
    assert theirs.layer_types == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ]
    assert theirs.rope_parameters["sliding_attention"]["rope_theta"] == 10_000.0
    assert theirs.sliding_window == 4  # transformers' half window is ours
    # A config.json from the Hub (transformers 4): the pattern and thetas by their old names.
    old = {k: v for k, v in written.items() if k not in ("layer_types", "rope_parameters")}
    old.update(global_attn_every_n_layers=2, global_rope_theta=1e5, local_rope_theta=5e3)
    got = hf.bert_config_from_hf(old)
    assert [got.is_global(i) for i in range(4)] == [True, False, True, False]
    assert (got.global_rope_theta, got.local_rope_theta) == (1e5, 5e3)
    # A half window by transformers' other name: it sets local_attention, whatever that says.
    halved = written | {"sliding_window": 2}
    assert transformers.ModernBertConfig(**halved).local_attention == 4
    assert hf.bert_config_from_hf(halved).attention_window(1) == 2
    with pytest.raises(cli.UserError, match="sliding_window -1 is negative"):
        hf.bert_config_from_hf(written | {"sliding_window": -1})


def test_a_window_of_0_is_transformers_self_only_window(tmp_path):
    """local_attention 0: transformers' sliding layers read only the token itself (half window
    0 // 2 + 1 exclusive); ours took 0 for no window at all and attended everywhere."""
    theirs = hf_model(seed=4, local_attention=0)
    theirs.save_pretrained(str(tmp_path))
    ours, _ = hf.load_hf(str(tmp_path))
    assert [ours.config.attention_window(i) for i in range(4)] == [None, 0, 0, None]
    assert_parity(ours, theirs)
    with pytest.raises(cli.UserError, match="local_attention -2 is negative"):
        hf.bert_config_from_hf(theirs.config.to_dict() | {"local_attention": -2})


def test_mistakes_are_named(tmp_path):
    cfg = hf.bert_config_from_hf(hf_model().config.to_dict())
    written = hf.hf_config_from_bert(cfg)
    odd = written | {"layer_types": ["sliding_attention", "full_attention"] * 2}
    with pytest.raises(cli.UserError, match="not a global layer every N layers"):
        hf.bert_config_from_hf(odd)
    scaled = json.loads(json.dumps(written))
    scaled["rope_parameters"]["full_attention"]["rope_type"] = "linear"
    with pytest.raises(cli.UserError, match="only 'default'"):
        hf.bert_config_from_hf(scaled)
    # transformers 4's rope_scaling, which transformers 5 applies to both kinds of layer.
    linear = {"rope_type": "linear", "factor": 2.0}
    with pytest.raises(cli.UserError, match="rope_scaling has rope_type 'linear'"):
        hf.bert_config_from_hf(written | {"rope_scaling": linear})
    assert hf.bert_config_from_hf(written | {"rope_scaling": None}) == cfg
    with pytest.raises(cli.UserError, match="hidden_activation 'silu'"):
        hf.bert_config_from_hf(written | {"hidden_activation": "silu"})
    mixed = dataclasses.replace(cfg, mlp_type="gelu")
    with pytest.raises(cli.UserError, match=r"no Hugging Face class.*mlp_type='gelu'"):
        hf.hf_config_from_bert(mixed)
    (tmp_path / "config.json").write_text(json.dumps(written))
    save_file({"unrelated": np.zeros(1, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(hf.CheckpointError, match=r"lacks encoder weights.*not a ModernBERT"):
        hf.load_hf(str(tmp_path))


def test_a_bare_modernbert_model_gets_a_fresh_head(hf_dir, tmp_path):
    _, theirs = hf_dir
    theirs.model.save_pretrained(str(tmp_path))  # ModernBertModel's names
    ours, report = hf.load_hf(str(tmp_path))
    assert report.initialized == ["head.dense.weight", "head.norm.weight", "decoder.bias"]
    ids, mask = padded_batch()
    ref = theirs.model(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask))
    seq, _ = nnx.jit(lambda m, *a: m(*a))(ours.bert, ids, mask, ids * 0)
    n = mask.sum(1)
    for row in range(len(ids)):
        np.testing.assert_allclose(
            np.asarray(seq)[row, : n[row]],
            ref.last_hidden_state.detach().numpy()[row, : n[row]],
            atol=1e-4,
        )


def test_pretraining_finetuning_and_embed_read_a_modernbert_directory(hf_dir, tmp_path, capsys):
    path, theirs = hf_dir
    # Pre-training's train.init_checkpoint: the run's own config, the directory's weights.
    run_config = hf.bert_config_from_hf(theirs.config.to_dict(), scan_layers=True)
    params, report = hf.load_hf_params(path, run_config)
    assert report.initialized == []
    assert_parity(M.model_from_params(run_config, params), theirs)
    assert "other model settings" not in capsys.readouterr().err
    # Another window and RoPE base in the run's config: used, and said.
    other = dataclasses.replace(run_config, local_attention=16, global_rope_theta=1e4)
    hf.load_hf_params(path, other)
    err = capsys.readouterr().err
    assert "global_rope_theta=160000.0 (this run: 10000.0)" in err
    assert "attention windows [None, 4, 4, None] (this run: [None, 8, 8, None])" in err
    bert = M.BertConfig(vocab_size=len(VOCAB), **tiny.SHAPE, **BERT_REST)
    with pytest.raises(hf.CheckpointError, match="holds a ModernBERT model but the config"):
        hf.load_hf_params(path, bert)
    # Embed: the encoder's states are transformers' ModernBertModel's; pooled is the [CLS] state.
    model, tokenizer = embed.load_encoder(path)
    texts = ["good w1 alice", "w3 " * 30 + "paris"]  # the second longer than the window
    out = embed.embed_texts(model, tokenizer, texts, max_seq_length=48, batch_size=2)
    ref = theirs.model(
        input_ids=torch.tensor(out["input_ids"]).long(),
        attention_mask=torch.tensor(out["attention_mask"]),
    ).last_hidden_state.detach()
    for row, n in enumerate(out["attention_mask"].sum(1)):
        np.testing.assert_allclose(out["last_hidden_state"][row, :n], ref[row, :n], atol=1e-4)
    np.testing.assert_array_equal(out["pooled"], out["last_hidden_state"][:, 0])
    # Fine-tuning's --init: the task model's encoder holds the directory's weights.
    config = make_config(format="glue", layout="sst2", train_file=sst2_file(tmp_path / "t", 8, 0))
    run = runs.prepare(config, path)
    got = nnx.to_pure_dict(nnx.state(run.model.bert, nnx.Param))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params["bert"])):
        np.testing.assert_array_equal(a, b)
    # The task head's dense and norm are the MLM head's, as transformers loads them; the
    # fine-tuning config's pooling wins over the directory's.
    config.export, config.model.classifier_pooling = True, "mean"
    run = runs.prepare(config, path)
    assert run.model.config.classifier_pooling == "mean"
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    head = {k: v.detach().numpy() for k, v in loaded.head.state_dict().items()}
    np.testing.assert_array_equal(run.model.head.transform.kernel[...], head["dense.weight"].T)
    np.testing.assert_array_equal(run.model.head.transform_norm.scale[...], head["norm.weight"])
    loaded = pretrained.load(path)
    assert set(loaded.params) == {"bert", "mlm"} and loaded.vocab_file.endswith("vocab.txt")


def test_a_tokenizer_json_passes_through_the_export(tmp_path):
    """The run's tokenizer.json (BPE here) is copied as it is, with its tokenizer_config.json;
    transformers' fast tokenizer from the export gives the library's ids."""
    tokenizers = pytest.importorskip("tokenizers")
    source = tmp_path / "tok"
    source.mkdir()
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=60, special_tokens=["[PAD]", "[UNK]"])
    bpe.train_from_iterator(["good w1 alice paris rome", "bad w2 bob oslo"] * 20, trainer)
    bpe.save(str(source / "tokenizer.json"))
    (source / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]"})
    )
    out = tmp_path / "out"
    out.mkdir()
    hf.save_tokenizer(str(source / "tokenizer.json"), str(out), False, 64)
    assert sorted(os.listdir(out)) == ["tokenizer.json", "tokenizer_config.json"]
    assert (out / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "good alice w2 oslo"
    assert theirs(text, add_special_tokens=False)["input_ids"] == bpe.encode(text).ids


def test_an_untied_decoder_is_reported_not_silently_replaced(tmp_path, capsys):
    """tie_word_embeddings=false: the file's decoder.weight is its own; our MLM output is the word
    embeddings, so the import says it left the decoder out (the encoder is still transformers')."""
    theirs = hf_model(seed=5, tie_word_embeddings=False)
    assert not torch.equal(theirs.decoder.weight, theirs.model.embeddings.tok_embeddings.weight)
    theirs.save_pretrained(str(tmp_path))
    ours, report = hf.load_hf(str(tmp_path))
    assert report.unused == ["decoder.weight"]
    assert "tie_word_embeddings false" in capsys.readouterr().err
    ids, mask = padded_batch()
    ref = theirs.model(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask))
    seq, _ = nnx.jit(lambda m, *a: m(*a))(ours.bert, ids, mask, ids * 0)
    for row, n in enumerate(mask.sum(1)):
        np.testing.assert_allclose(
            np.asarray(seq)[row, :n], ref.last_hidden_state.detach().numpy()[row, :n], atol=1e-4
        )
    # A tied model (transformers' default) is silent: its decoder is the word embeddings.
    hf_model(seed=5).save_pretrained(str(tmp_path / "tied"))
    assert hf.load_hf(str(tmp_path / "tied"))[1].unused == []
    assert "warning" not in capsys.readouterr().err


def test_an_export_with_a_vocab_txt_loads_in_transformers_autotokenizer(hf_dir, tmp_path):
    """transformers 5 reads a modernbert directory's tokenizer from tokenizer.json only: the
    export writes one for a vocab.txt, giving our tokenizer's ids, [MASK] named for fill-mask."""
    path, _ = hf_dir
    ours, _ = hf.load_hf(path)
    vocab = os.path.join(path, "vocab.txt")
    hf.save_hf(ours, vocab, str(tmp_path), special_ids={"pad": 0, "cls": 2, "sep": 3})
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    tok = pretrained.load(path).tokenizer
    for text in ["Good w1 ALICE, paris!", "bad bob xyzzy oslo", "Alíce  w2\tgood"]:
        want = [tok.cls_id, *tok.convert_tokens_to_ids(tok.tokenize(text)), tok.sep_id]
        assert theirs(text)["input_ids"] == want, text
    assert (theirs.mask_token, theirs.pad_token_id) == ("[MASK]", tok.pad_id)


def test_a_field_of_the_wrong_kind_is_named(tmp_path):
    """A null, a string or a list where config.json holds a number, a flag or an object: each
    refused naming the field. Before, `num_attention_heads: 0` and a list for rope_parameters were
    tracebacks, `decoder_bias: "false"` silently became true, and a null window or pattern was
    Python's "int() argument must be ..." naming no field."""
    written = hf.hf_config_from_bert(hf.bert_config_from_hf(hf_model().config.to_dict()))
    wrong = {  # field -> values of the wrong kind for it
        "num_attention_heads": [0, -2, "2", 2.0, None],
        "hidden_size": ["32", None, True],
        "local_attention": [None, "8", [8], 8.5],
        "global_attn_every_n_layers": [None, "3"],
        "layer_types": ["full_attention", 5],
        "rope_parameters": [[1, 2], "default"],
        "rope_scaling": ["linear"],
        "global_rope_theta": ["big", None],
        "norm_eps": [None, "1e-5"],
        "mlp_dropout": [None, "0.1"],
        "decoder_bias": ["false", None, 0],
        "norm_bias": ["true", 1],
        "max_position_embeddings": [None, "64"],
        "classifier_pooling": [None, 1, "max"],
        "classifier_dropout": [None, "0.1", 1.0],
    }
    for field, values in wrong.items():
        for value in values:
            config = json.loads(json.dumps(written)) | {field: value}
            if field in ("global_attn_every_n_layers", "global_rope_theta"):
                config.pop({"global_rope_theta": "rope_parameters"}.get(field, "layer_types"))
            with pytest.raises(cli.UserError, match=field) as e:
                hf.bert_config_from_hf(config)
            assert repr(value) in str(e.value) or str(value) in str(e.value), (field, value)
    nested = json.loads(json.dumps(written))
    nested["rope_parameters"]["full_attention"] = "x"
    with pytest.raises(cli.UserError, match="full_attention is 'x'"):
        hf.bert_config_from_hf(nested)
    nested["rope_parameters"]["full_attention"] = {"rope_type": "default", "rope_theta": "1e4"}
    with pytest.raises(cli.UserError, match="rope_theta is '1e4'"):
        hf.bert_config_from_hf(nested)
    # Through the import: the directory's config file is named.
    (tmp_path / "config.json").write_text(json.dumps(written | {"num_attention_heads": 0}))
    with pytest.raises(cli.UserError, match="num_attention_heads is 0"):
        hf.load_hf(str(tmp_path))


def test_a_scaled_rope_is_refused_wherever_transformers_would_scale_it():
    """Every spelling of a layer kind's RoPE entry and of transformers 4's rope_scaling: we import
    exactly the configs transformers 5 runs with unscaled ('default') RoPE in both kinds. An entry
    spelling its type as `type` (the older key) was imported unscaled where transformers scales."""
    written = hf.hf_config_from_bert(hf.bert_config_from_hf(hf_model().config.to_dict()))
    entries = ["absent", {}, {"rope_theta": 5e3}]
    for spelling in ("rope_type", "type"):
        entries += [{spelling: "default"}, {spelling: "linear", "factor": 2.0}]
    entries.append({"rope_type": "default", "type": "linear", "factor": 2.0})
    scalings = [None, {"type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}]
    for full, sliding, scaling in itertools.product(entries, entries[:3], scalings):
        config = json.loads(json.dumps(written))
        kinds = {"full_attention": full, "sliding_attention": sliding}
        config["rope_parameters"] = {k: v for k, v in kinds.items() if v != "absent"}
        if scaling is not None:
            config["rope_scaling"] = scaling
        try:
            theirs = transformers.ModernBertConfig(**json.loads(json.dumps(config)))
        except KeyError:  # rope_scaling with a kind absent from rope_parameters: theirs fails
            continue
        unscaled = all(p["rope_type"] == "default" for p in theirs.rope_parameters.values())
        try:
            ours = hf.bert_config_from_hf(config)
        except cli.UserError as e:
            assert not unscaled, (full, scaling, e)
            assert "only 'default' (unscaled) RoPE" in str(e)
            continue
        assert unscaled, (full, scaling)
        want = theirs.rope_parameters
        assert ours.global_rope_theta == want["full_attention"]["rope_theta"]
        assert ours.local_rope_theta == want["sliding_attention"]["rope_theta"]


@pytest.mark.parametrize(
    "kind, pooling, auto_class",
    [
        ("classification", "cls", "AutoModelForSequenceClassification"),
        ("classification", "mean", "AutoModelForSequenceClassification"),
        ("regression", "mean", "AutoModelForSequenceClassification"),
        ("tagging", "cls", "AutoModelForTokenClassification"),
        ("span", "cls", "AutoModelForQuestionAnswering"),
    ],
)
def test_a_task_model_exports_as_transformers_modernbert_for(tmp_path, kind, pooling, auto_class):
    """A fine-tuned ModernBERT (noise on every weight, LoRA adapters merged) loads as transformers'
    ModernBertFor* of its kind, with the same logits on padded rows; mean pooling is per
    document on packed rows."""
    from bert_jax.finetune import heads, lora

    cfg = hf.bert_config_from_hf(hf_model().config.to_dict())
    cfg = dataclasses.replace(cfg, num_hidden_layers=2, classifier_pooling=pooling, norm_bias=True)
    model = heads.TaskModel(dataclasses.replace(cfg, head_bias=True), kind, 3, rngs=nnx.Rngs(0))
    lora.add_adapters(model.bert, ("query", "output"), 2, 4.0, rngs=nnx.Rngs(1))
    leaves, tree = jax.tree.flatten(nnx.state(model, nnx.Param))
    keys = jax.random.split(jax.random.key(2), len(leaves))
    noisy = [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    nnx.update(model, jax.tree.unflatten(tree, noisy))
    ids, mask = padded_batch()
    ours = model(ids, mask, ids * 0)
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    out = str(tmp_path / "export")
    written = heads.export_hf(model, ("a", "b", "c"), out, str(tmp_path / "vocab.txt"))
    assert os.path.isfile(os.path.join(out, "tokenizer.json"))  # as the MLM export writes it
    theirs = getattr(transformers, auto_class).from_pretrained(out, attn_implementation="eager")
    assert (
        type(theirs).__name__
        == written["architectures"][0]
        == "ModernBert"
        + {
            "tagging": "ForTokenClassification",
            "span": "ForQuestionAnswering",
        }.get(kind, "ForSequenceClassification")
    )
    with torch.no_grad():
        got = theirs.eval()(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask))
    if kind == "span":
        ours, got = np.stack(ours, -1), np.stack([got.start_logits, got.end_logits], -1)
    else:
        got = got.logits.numpy()[..., 0] if kind == "regression" else got.logits.numpy()
    real = mask > 0 if kind in ("tagging", "span") else slice(None)  # padding: any logits
    np.testing.assert_allclose(np.asarray(ours)[real], got[real], atol=1e-4, rtol=0)
    if pooling == "mean":  # packed rows: each slot's logits are its document's alone
        ids, mask, packed, pieces = packed_rows()
        alone = np.zeros((len(pieces), LENGTH), np.int32)
        for i, (_, _, doc) in enumerate(pieces):
            alone[i, : len(doc)] = doc
        want = model(alone, (alone > 0).astype(np.int32), alone * 0)
        got = model(ids, mask, ids * 0, **packed)  # [rows, slots, ...]
        np.testing.assert_allclose(np.reshape(got, np.shape(want)), want, atol=1e-5, rtol=0)
