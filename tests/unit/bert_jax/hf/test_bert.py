"""Hugging Face import/export: parity with a random transformers BertForPreTraining, both ways."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from bert_jax import cli, export
from bert_jax.hf import architectures, bert
from bert_jax.model import encoder as M
from bert_jax.text.tokenization import WordPieceTokenizer
from support import tiny
from support.golden import REPO

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=30522,
    **tiny.SHAPE,  # configs/tiny.py's
    max_position_embeddings=64,
    type_vocab_size=2,
)
HEADS = [
    "cls.predictions.transform.dense.weight",
    "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight",
    "cls.predictions.transform.LayerNorm.bias",
    "cls.predictions.bias",
    "cls.seq_relationship.weight",
    "cls.seq_relationship.bias",
]


def padded_batch(seed=0, batch=4, length=24, predictions=6):
    """Right-padded random ids; one row is all padding, one is full."""
    rng = np.random.default_rng(seed)
    lengths = np.array([length, 11, 3, 0][:batch])
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1000, TINY["vocab_size"], size=(batch, length)).astype(np.int32) * mask
    segments = ((np.arange(length)[None, :] >= lengths[:, None] // 2) * mask).astype(np.int32)
    positions = np.sort(rng.integers(0, length, size=(batch, predictions)), axis=1).astype(np.int32)
    return ids, mask, segments, positions


def hf_logits(hf_model, ids, mask, segments, positions):
    with torch.no_grad():
        out = hf_model(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            token_type_ids=torch.tensor(segments, dtype=torch.long),
        )
    mlm = out.prediction_logits.numpy()[np.arange(len(ids))[:, None], positions]
    return mlm, out.seq_relationship_logits.numpy()


def ours_logits(model, ids, mask, segments, positions):
    mlm, nsp = nnx.jit(lambda m, *a: m(*a))(model, ids, mask, segments, positions)
    return np.asarray(mlm), np.asarray(nsp)


def params_of(model):
    return jax.tree.leaves(nnx.to_pure_dict(nnx.state(model, nnx.Param)))


def perturb(model, seed):
    """Noise on every parameter, so zero biases and unit LayerNorm scales cannot hide a mix-up."""
    state = nnx.state(model, nnx.Param)
    leaves, treedef = jax.tree.flatten(nnx.to_pure_dict(state))
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    noisy = [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    nnx.replace_by_pure_dict(state, jax.tree.unflatten(treedef, noisy))
    nnx.update(model, state)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A randomly initialized transformers BertForPreTraining saved as safetensors (eager
    attention)."""
    torch.manual_seed(0)
    # Eager attention: the reference math, also on an all-padding row (SDPA zeroes that row).
    model = transformers.BertForPreTraining(
        transformers.BertConfig(**TINY, attn_implementation="eager")
    )
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = str(tmp_path_factory.mktemp("hf_random"))
    model.save_pretrained(path)
    return path, model.eval()


@pytest.fixture(scope="module")
def imported(hf_dir):
    return bert.load_hf(hf_dir[0])


def test_import_matches_transformers(hf_dir, imported):
    model, report = imported
    assert report.initialized == [] and report.unused == []
    batch = padded_batch()
    ref_mlm, ref_nsp = hf_logits(hf_dir[1], *batch)
    mlm, nsp = ours_logits(model, *batch)
    np.testing.assert_allclose(mlm, ref_mlm, atol=1e-4, rtol=0)
    np.testing.assert_allclose(nsp, ref_nsp, atol=1e-4, rtol=0)
    # transformers' default SDPA attention agrees too on every row that has a real token.
    sdpa = transformers.BertForPreTraining.from_pretrained(hf_dir[0]).eval()
    sdpa_mlm, sdpa_nsp = hf_logits(sdpa, *batch)
    np.testing.assert_allclose(mlm[:3], sdpa_mlm[:3], atol=1e-4, rtol=0)
    np.testing.assert_allclose(nsp[:3], sdpa_nsp[:3], atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab_file):
    cfg = bert.bert_config_from_hf(
        TINY
        | {
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "initializer_range": 0.02,
        }
    )
    model = M.BertForPreTraining(cfg, rngs=nnx.Rngs(7))
    perturb(model, 1)
    out = str(tmp_path_factory.mktemp("export"))
    bert.save_hf(model, vocab_file, out)
    return model, out


def test_export_loads_in_transformers_and_matches(exported):
    model, out = exported
    assert sorted(os.listdir(out)) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    loaded, info = transformers.BertForPreTraining.from_pretrained(
        out, output_loading_info=True, attn_implementation="eager"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    batch = padded_batch(seed=1)
    ref_mlm, ref_nsp = hf_logits(loaded.eval(), *batch)
    mlm, nsp = ours_logits(model, *batch)
    np.testing.assert_allclose(mlm, ref_mlm, atol=1e-4, rtol=0)
    np.testing.assert_allclose(nsp, ref_nsp, atol=1e-4, rtol=0)


def test_exported_tokenizer_gives_our_ids(exported, vocab_file):
    text = "The quick brown fox's naïve résumé, unbelievably, jumped."
    tok = transformers.AutoTokenizer.from_pretrained(exported[1])
    ours = WordPieceTokenizer(vocab_file, do_lower_case=True)
    assert tok(text)["input_ids"] == [ours.cls_id] + ours.encode(text) + [ours.sep_id]


def test_export_then_import_is_bit_exact(exported):
    model, out = exported
    again, report = bert.load_hf(out)
    assert report.initialized == [] and report.unused == []
    assert again.config == model.config
    for a, b in zip(params_of(model), params_of(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_pytorch_model_bin_imports_like_safetensors(hf_dir, imported, tmp_path):
    path, hf_model = hf_dir
    # The full state dict, as old checkpoints hold it: tied decoder and position_ids included.
    torch.save(hf_model.state_dict(), tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(open(os.path.join(path, "config.json")).read())
    model, report = bert.load_hf(str(tmp_path))
    assert report.initialized == [] and report.source.endswith("pytorch_model.bin")
    for a, b in zip(params_of(model), params_of(imported[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sharded_pytorch_model_bin_imports_like_safetensors(hf_dir, imported, tmp_path):
    """transformers 4's sharded save: pytorch_model-0000K-of-0000N.bin and the index naming them
    (it was refused: 'no weights in DIR')."""
    path, hf_model = hf_dir
    state = hf_model.state_dict()
    names = sorted(state)
    shards = [names[: len(names) // 2], names[len(names) // 2 :]]
    weight_map = {}
    for k, shard in enumerate(shards, 1):
        file = f"pytorch_model-{k:05d}-of-00002.bin"
        torch.save({name: state[name] for name in shard}, tmp_path / file)
        weight_map.update(dict.fromkeys(shard, file))
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shutil.copy(os.path.join(path, "config.json"), tmp_path)
    model, report = bert.load_hf(str(tmp_path))
    assert report.initialized == [] and report.source == str(index)
    for a, b in zip(params_of(model), params_of(imported[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    os.remove(tmp_path / "pytorch_model-00002-of-00002.bin")
    with pytest.raises(cli.UserError, match=r"pytorch_model-00002-of-00002\.bin"):
        bert.load_hf(str(tmp_path))


def test_bert_model_checkpoint_gets_fresh_heads(hf_dir, imported, tmp_path):
    torch.manual_seed(1)
    body = transformers.BertModel(transformers.BertConfig(**TINY))
    body.save_pretrained(str(tmp_path))  # names without "bert.", no cls.* heads
    model, report = bert.load_hf(str(tmp_path))
    assert sorted(report.initialized) == sorted(HEADS)
    assert "initialized (absent from the file)" in str(report)
    ours = bert.to_hf_state_dict(model)  # torch layout and names
    for name, value in body.state_dict().items():
        if name != "embeddings.position_ids":
            np.testing.assert_array_equal(ours["bert." + name], value.numpy(), err_msg=name)
    assert np.isfinite(ours["cls.seq_relationship.weight"]).all()


def test_configs_round_trip():
    cfg = bert.bert_config_from_hf(
        TINY
        | {
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.0,
            "initializer_range": 0.02,
            "hidden_act": "gelu",
        }
    )
    assert bert.bert_config_from_hf(bert.hf_config_from_bert(cfg)) == cfg
    hf_cfg = transformers.BertConfig(**bert.hf_config_from_bert(cfg))
    assert hf_cfg.hidden_size == cfg.hidden_size and hf_cfg.layer_norm_eps == 1e-12


def test_import_errors_say_what_to_fix(hf_dir, tmp_path):
    with pytest.raises(bert.CheckpointError, match="not a directory"):
        bert.load_hf(str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text(
        json.dumps(
            TINY
            | {
                "hidden_dropout_prob": 0.1,
                "attention_probs_dropout_prob": 0.1,
                "initializer_range": 0.02,
            }
        )
    )
    with pytest.raises(
        bert.CheckpointError, match=r"no weights in .*model.safetensors.*config.json"
    ):
        bert.load_hf(str(tmp_path))
    with pytest.raises(bert.CheckpointError, match="hidden_act 'relu' is not supported"):
        bert.bert_config_from_hf(TINY | {"hidden_act": "relu"})
    cfg = bert.bert_config_from_hf(
        json.load(open(os.path.join(hf_dir[0], "config.json"))),
        hidden_size=48,
        num_attention_heads=3,
    )
    with pytest.raises(
        bert.CheckpointError, match=r"word_embeddings.weight has shape \(30522, 32\)"
    ):
        bert.load_hf(hf_dir[0], cfg)
    save_file({"unrelated": np.zeros(1, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(bert.CheckpointError, match="lacks encoder weights"):
        bert.load_hf(str(tmp_path))


def _hf_to_tf_name(name):
    """transformers name -> the original TF BERT variable name, and whether the value transposes."""
    tf_name = name.replace("bert.encoder.layer.", "bert/encoder/layer_").replace(".", "/")
    transpose = False
    if tf_name.endswith("_embeddings/weight"):
        tf_name = tf_name[: -len("/weight")]
    elif tf_name == "cls/seq_relationship/weight":
        tf_name = "cls/seq_relationship/output_weights"
    elif tf_name == "cls/seq_relationship/bias":
        tf_name = "cls/seq_relationship/output_bias"
    elif tf_name == "cls/predictions/bias":
        tf_name = "cls/predictions/output_bias"
    elif "LayerNorm" in tf_name:
        tf_name = tf_name.replace("/weight", "/gamma").replace("/bias", "/beta")
    elif tf_name.endswith("/weight"):
        tf_name, transpose = tf_name[: -len("/weight")] + "/kernel", True
    return tf_name, transpose


def test_tensorflow_checkpoint(hf_dir, imported, tmp_path):
    path, _ = hf_dir
    (tmp_path / "bert_config.json").write_text(
        json.dumps(
            {
                k: v
                for k, v in json.load(open(os.path.join(path, "config.json"))).items()
                if k in (*architectures._SHARED_FIELDS, "hidden_act") and k != "layer_norm_eps"
            }
        )
    )
    try:
        import tensorflow as tf
    except ImportError:
        (tmp_path / "bert_model.ckpt.index").write_bytes(b"")
        with pytest.raises(cli.UserError, match="needs TensorFlow: pip install tensorflow"):
            bert.load_hf(str(tmp_path))
        return
    names, values = [], []
    for name, value in bert.to_hf_state_dict(imported[0]).items():
        tf_name, transpose = _hf_to_tf_name(name)
        names.append(tf_name)
        values.append(value.T.copy() if transpose else value)
        if tf_name.endswith("kernel"):  # optimizer slots, as in Google's released checkpoints
            names += [tf_name + "/adam_m", tf_name + "/adam_v"]
            values += [np.zeros_like(values[-1])] * 2
    names.append("global_step")
    values.append(np.array(1000, np.int64))
    tf.raw_ops.SaveV2(
        prefix=str(tmp_path / "bert_model.ckpt"),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=values,
    )
    model, report = bert.load_hf(str(tmp_path))
    assert report.initialized == [] and report.unused == [] and "TensorFlow" in report.source
    for a, b in zip(params_of(model), params_of(imported[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_export_command(tmp_path, vocab_file, save_checkpoint):
    from configs import tiny

    config = tiny.get_config()
    models = {}
    for step in (2, 5):
        models[step] = M.BertForPreTraining(
            M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(step)
        )
        perturb(models[step], step)
        save_checkpoint(tmp_path / "run", models[step], config, step)
    with pytest.raises(ValueError, match="pass --vocab_file"):
        export.export(str(tmp_path / "run"), str(tmp_path / "hf"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax.export",
            f"--workdir={tmp_path / 'run'}",
            "--step=2",
            f"--output_dir={tmp_path / 'hf'}",
            f"--vocab_file={vocab_file}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exported step 2" in proc.stdout
    loaded = transformers.BertForPreTraining.from_pretrained(
        str(tmp_path / "hf"), attn_implementation="eager"
    )
    batch = padded_batch(seed=2)
    ref_mlm, ref_nsp = hf_logits(loaded.eval(), *batch)
    mlm, nsp = ours_logits(models[2], *batch)
    np.testing.assert_allclose(mlm, ref_mlm, atol=1e-4, rtol=0)
    np.testing.assert_allclose(nsp, ref_nsp, atol=1e-4, rtol=0)


def test_params_for_a_training_run(hf_dir, imported):
    """A run's config (other dropout, bf16 compute) takes the file's weights as its initial
    params."""
    from bert_jax.model import sharding

    run_config = bert.bert_config_from_hf(
        json.load(open(os.path.join(hf_dir[0], "config.json"))),
        hidden_dropout_prob=0.0,
        dtype="bfloat16",
    )
    mesh = sharding.make_mesh(data=4, fsdp=2, tensor=1)
    abstract = nnx.state(
        nnx.eval_shape(lambda: M.BertForPreTraining(run_config, rngs=nnx.Rngs(0))), nnx.Param
    )
    shardings = sharding.param_shardings(abstract, mesh, (("embed", "fsdp"),))
    params, report = bert.load_hf_params(hf_dir[0], run_config, shardings=shardings)
    assert report.initialized == []
    word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert word.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp")
    for a, b in zip(jax.tree.leaves(params), params_of(imported[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_training_run_starts_from_a_hugging_face_directory(testdata, vocab_file, tmp_path):
    """train.init_checkpoint=<HF dir>: continue pre-training a public model from its weights."""
    from bert_jax.training import checkpoints, pretrain
    from configs import tiny

    config = tiny.get_config()
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(7))
    perturb(model, seed=1)
    bert.save_hf(model, vocab_file, str(tmp_path / "hf"))
    config.data.train_files = str(testdata / "sample_text.L128.P20.dupe5.tfrecord")
    config.data.max_seq_length, config.data.max_predictions_per_seq = 128, 20  # no manifest
    config.train.update(
        num_train_steps=1, global_batch_size=4, init_checkpoint=str(tmp_path / "hf")
    )
    # Warmup's first step has rate 0 (a rate of 0 itself is a config error): the step keeps the
    # weights.
    config.optim.learning_rate, config.optim.warmup_steps = 1e-3, 1
    config.mesh.num_devices = 2
    result = pretrain.train_and_evaluate(config, str(tmp_path / "run"))
    assert result["step"] == 1
    got, _ = checkpoints.restore_params(str(tmp_path / "run"))
    for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(got)[0], params_of(model)):
        np.testing.assert_array_equal(
            np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path)
        )


def test_export_checks_the_vocabulary_and_the_checkpoint(
    tmp_path, vocab_file, save_checkpoint, flip_bytes
):
    """The issue's cases: a 200-entry vocabulary for a 30,522-word model exported with exit 0,
    and a damaged checkpoint exported its NaN weights. Both are errors now, and a failed export
    leaves no directory behind."""
    from bert_jax import storage
    from bert_jax.training import checkpoints
    from configs import tiny

    config = tiny.get_config()
    # What data_facts.resolve records from the data's manifest.
    config.data.update(vocab_file=vocab_file, vocab_md5=storage.md5(vocab_file))
    config.data.vocab_size = 30522
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(0))
    run = tmp_path / "run"
    for step in (2, 5):
        save_checkpoint(run, model, config, step)
    small = tmp_path / "small_vocab.txt"
    small.write_text("".join(line + "\n" for line in open(vocab_file).read().split("\n")[:200]))

    out = tmp_path / "hf"
    assert export.export(str(run), str(out))["step"] == 5  # the vocabulary the run recorded
    assert open(out / "vocab.txt").read() == open(vocab_file).read()
    with pytest.raises(ValueError, match=r"small_vocab.txt' is not the vocabulary this run was"):
        export.export(str(run), str(tmp_path / "hf2"), vocab_file=str(small))
    old = tmp_path / "old_run"  # a run from before the contract: the model's size decides
    save_checkpoint(old, model, tiny.get_config(), 1)
    with pytest.raises(
        ValueError, match=r"200 entries; the model's word-embedding table has 30522"
    ):
        export.export(str(old), str(tmp_path / "hf2"), vocab_file=str(small))

    flip_bytes(run / "checkpoints" / "5")
    with pytest.raises(
        checkpoints.DamagedCheckpoint,
        match=r"checkpoints/5 is damaged: .* the other saved steps are \[2\]: pass one \(--step=2",
    ):
        export.export(str(run), str(tmp_path / "hf2"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "old_run", "run", "small_vocab.txt"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax.export",
            f"--workdir={run}",
            f"--output_dir={tmp_path / 'hf2'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: checkpoint "), (
        proc.stderr
    )
    assert not (tmp_path / "hf2").exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("layer_norm_eps", "1e-12"),
        ("layer_norm_eps", 0),
        ("layer_norm_eps", None),
        ("initializer_range", "0.02"),
        ("hidden_dropout_prob", None),
        ("attention_probs_dropout_prob", "0.1"),
        ("hidden_dropout_prob", True),
    ],
)
def test_a_config_json_number_of_the_wrong_kind_names_the_field(field, value):
    """A hand-edited config.json with text, null or a bool where a real number belongs: one
    CheckpointError naming the field (was a TypeError inside the traced LayerNorm for
    layer_norm_eps, or "'<=' not supported" for a dropout rate)."""
    hf = TINY | {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    hf |= {"initializer_range": 0.02, field: value}
    with pytest.raises(cli.UserError, match=f"{field} must be .*got {value!r}"):
        bert.bert_config_from_hf(hf)


def test_encoder_weights_the_config_leaves_out_are_a_warning(hf_dir, tmp_path, capsys):
    """A config.json with fewer layers than its weights (an edit, or a file from another model):
    the model follows the config as transformers' does, but the layers it drops are said on
    stderr, not only in the import report's log line nobody sees."""
    shutil.copytree(hf_dir[0], tmp_path / "cut")
    path = tmp_path / "cut" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"num_hidden_layers": 1}))
    model, report = bert.load_hf(str(tmp_path / "cut"))
    assert model.config.num_hidden_layers == 1
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and len(err.splitlines()) == 1, err
    assert "num_hidden_layers=1" in err and "bert.encoder.layer.1." in err
    bert.load_hf(hf_dir[0])  # its own config: no warning
    assert capsys.readouterr().err == ""
    # Nor for a buffer older transformers saved (bert-base-uncased's pytorch_model.bin has it).
    shutil.copytree(hf_dir[0], tmp_path / "buffer")
    tensors = load_file(str(tmp_path / "buffer" / "model.safetensors"))
    tensors["bert.embeddings.position_ids"] = np.arange(64)[None]
    save_file(tensors, str(tmp_path / "buffer" / "model.safetensors"))
    _, report = bert.load_hf(str(tmp_path / "buffer"))
    assert report.unused == ["bert.embeddings.position_ids"]
    assert capsys.readouterr().err == ""


def test_an_untied_decoder_is_said_not_dropped_silently(tmp_path, capsys):
    """A BertForMaskedLM saved with tie_word_embeddings false holds its own decoder weight; our
    MLM head ties it to the word embeddings, so the loaded model's MLM logits differ from
    transformers'. That was silent (the decoder counted as a tied repeat); now it is a warning
    and the decoder is listed as not used. A tied one stays silent."""
    for tie in (True, False):
        torch.manual_seed(0)
        config = transformers.BertConfig(**TINY, tie_word_embeddings=tie)
        transformers.BertForMaskedLM(config).save_pretrained(str(tmp_path / str(tie)))
        capsys.readouterr()  # transformers' progress bar
        _, report = bert.load_hf(str(tmp_path / str(tie)))
        err = capsys.readouterr().err
        if tie:
            assert err == "" and report.unused == []
        else:
            assert err.startswith("warning: ") and len(err.splitlines()) == 1, err
            assert "cls.predictions.decoder.weight" in err and "tie_word_embeddings" in err
            assert report.unused == ["cls.predictions.decoder.weight"]


def test_a_config_json_without_optional_fields_loads_with_transformers_defaults(
    hf_dir, imported, tmp_path
):
    """A hand-written config.json that leaves out fields transformers has defaults for (the
    dropouts, initializer_range, type_vocab_size, layer_norm_eps, hidden_act) loads as
    transformers loads it; it was refused ('the BERT config lacks [...]')."""
    shutil.copytree(hf_dir[0], tmp_path / "short")
    path = tmp_path / "short" / "config.json"
    optional = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
    optional += ("type_vocab_size", "layer_norm_eps", "hidden_act")
    path.write_text(
        json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k not in optional})
    )
    model, _ = bert.load_hf(str(tmp_path / "short"))
    theirs = transformers.BertConfig.from_pretrained(str(tmp_path / "short"))
    for field in optional[:-1]:
        assert getattr(model.config, field) == getattr(theirs, field), field
    for a, b in zip(params_of(model), params_of(imported[0])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A size left out is another model's config (DistilBERT's names them dim, n_layers, ...).
    config = json.loads(path.read_text())
    del config["intermediate_size"]
    path.write_text(json.dumps(config))
    with pytest.raises(bert.CheckpointError, match=r"model_type 'bert'\) lacks \['inter"):
        bert.load_hf(str(tmp_path / "short"))


@pytest.mark.parametrize("field", ["is_decoder", "add_cross_attention"])
def test_a_decoder_bert_is_refused_by_name(hf_dir, tmp_path, field):
    """A BertLMHeadModel's config.json (is_decoder true) makes transformers attend causally; it
    was loaded as a bidirectional encoder, every output silently different."""
    shutil.copytree(hf_dir[0], tmp_path / "decoder")
    path = tmp_path / "decoder" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {field: True}))
    with pytest.raises(bert.CheckpointError, match=rf"{field}.*attends causally"):
        bert.load_hf(str(tmp_path / "decoder"))


def test_a_run_config_that_does_not_fit_the_directory_is_named(tiny_hf):
    """train.init_checkpoint with a run whose config.model (its vocab_size from the data) does
    not fit the directory: the error said "does its config.json describe this checkpoint?",
    blaming a file that is right; it names the run's fields that differ, and the data's
    vocabulary."""
    theirs = bert.bert_config_from_hf(json.load(open(os.path.join(tiny_hf, "config.json"))))
    for changes in ({"vocab_size": 30522}, {"hidden_size": 48, "num_attention_heads": 3}):
        run = M.BertConfig(**{**vars(theirs), **changes})
        with pytest.raises(bert.CheckpointError) as e:
            bert.load_hf_params(tiny_hf, run)
        text = str(e.value)
        assert "config.json describe" not in text
        for field, value in changes.items():
            if field != "num_attention_heads":
                mine, its = value, getattr(theirs, field)
                assert f"this run's config.model has {field}={mine} (" in text
                assert f"config.json: {its})" in text
        assert ("tokenize the data with the model's tokenizer" in text) == ("vocab_size" in changes)


def test_a_sentencepiece_vocabulary_is_refused_not_exported_as_a_vocab_txt(tmp_path):
    """A run tokenized with SentencePiece (data_prep --vocab_file=sp.model): the export copied
    the binary model as vocab.txt under a BertTokenizer config, a directory transformers cannot
    load ("stream did not contain valid UTF-8"), and a ModernBERT export failed on it with
    "is it a vocab.txt?". Both are one error naming the file, before anything is written, as is
    a fine-tuning run that would export at its end."""
    from bert_jax.finetune import heads

    sp_model = tmp_path / "sp.model"
    sp_model.write_bytes(b"\n\x0b\n\x05<unk>\x15\x00\x00\x00\x00\xbe\x01")
    config = M.BertConfig(
        **TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.02
    )
    model = M.BertForPreTraining(config, rngs=nnx.Rngs(0))
    with pytest.raises(cli.UserError, match=r"sp\.model' is a SentencePiece model"):
        bert.save_hf(model, str(sp_model), str(tmp_path / "out"))
    assert not (tmp_path / "out" / "vocab.txt").exists()
    with pytest.raises(cli.UserError, match="SentencePiece"):
        heads.check_exportable(config, "classification", str(sp_model))


@pytest.mark.parametrize(
    "kind", ["Roberta", "XLMRoberta", "Camembert", "Ernie", "Electra", "Albert", "DistilBert"]
)
def test_another_models_directory_is_refused_not_loaded_as_bert(kind, tmp_path):
    """A bare RobertaModel (XLM-R's, CamemBERT's: their weights carry BertModel's names) was
    imported as a BERT and computed other states (RoBERTa's positions start after the padding
    id: 2.5 off on a random model), by embed, fine-tuning's --init and a run's init_checkpoint
    alike. Every Hugging Face model_type but BERT's and ModernBERT's is refused by name."""
    sizes = dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    sizes.update(intermediate_size=24, max_position_embeddings=40)
    if kind == "DistilBert":
        sizes = dict(vocab_size=99, dim=16, n_layers=1, n_heads=2, hidden_dim=24)
    config = getattr(transformers, f"{kind}Config")(**sizes)
    getattr(transformers, f"{kind}Model")(config).save_pretrained(str(tmp_path))
    match = rf"config\.json: model_type '{config.model_type}' is not supported"
    with pytest.raises(bert.CheckpointError, match=match):
        bert.load_hf(str(tmp_path))
    if kind != "DistilBert":  # a run's own config.model names the shapes: refused all the same
        with pytest.raises(bert.CheckpointError, match=match):
            run = dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
            run.update(type_vocab_size=2, initializer_range=0.02)
            bert.load_hf_params(str(tmp_path), M.BertConfig(**sizes, **run))


@pytest.mark.parametrize("pad", [0, 1, 7, None])
def test_the_exported_pad_token_id_is_the_tokenizers(tmp_path, pad):
    """A run whose tokenizer puts [PAD] elsewhere than 0 (a BPE tokenizer.json's <pad> at 1,
    a vocabulary of its own) was exported with pad_token_id 0 all the same: transformers'
    training then froze row 0 (a real token: <s>) and trained the padding's. The pre-training
    and the fine-tuning exports write the tokenizer's (0 where it has none)."""
    from bert_jax.finetune import heads

    config = M.BertConfig(
        **TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.02
    )
    model = M.BertForPreTraining(config, rngs=nnx.Rngs(0))
    bert.save_hf(model, None, str(tmp_path / "pre"), special_ids={"pad": pad, "cls": 2})
    task = heads.TaskModel(config, "classification", 3, rngs=nnx.Rngs(0))
    heads.export_hf(task, ["a", "b", "c"], str(tmp_path / "task"), None, pad_id=pad or 0)
    for name, cls in (("pre", "BertForPreTraining"), ("task", "BertForSequenceClassification")):
        hf = getattr(transformers, cls).from_pretrained(str(tmp_path / name))
        assert hf.config.pad_token_id == (pad or 0), name
        assert hf.bert.embeddings.word_embeddings.padding_idx == (pad or 0), name


def test_an_mlm_bias_saved_as_the_decoders_is_read(hf_dir, tmp_path):
    """A file holding the MLM bias under its tied name cls.predictions.decoder.bias alone
    (transformers saves either name of a tied pair; from_pretrained reads both): the bias was
    initialized to zeros and the file's ignored, every MLM logit off by it."""
    shutil.copytree(hf_dir[0], tmp_path / "alias")
    path = str(tmp_path / "alias" / "model.safetensors")
    tensors = load_file(path)
    tensors["cls.predictions.decoder.bias"] = tensors.pop("cls.predictions.bias")
    save_file(tensors, path, metadata={"format": "pt"})
    model, report = bert.load_hf(str(tmp_path / "alias"))
    assert report.initialized == [] and report.unused == []
    batch = padded_batch(seed=3)
    theirs = transformers.BertForPreTraining.from_pretrained(
        str(tmp_path / "alias"), attn_implementation="eager"
    ).eval()
    for ref, ours in zip(hf_logits(theirs, *batch), ours_logits(model, *batch)):
        np.testing.assert_allclose(ours, ref, atol=1e-4)


def _mlm_only(pooler: bool) -> M.BertConfig:
    """A tiny BERT without the NSP head (MLM-only pre-training), without dropout."""
    return M.BertConfig(
        **TINY,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.02,
        nsp_head=False,
        pooler=pooler,
    )


@pytest.mark.parametrize("pooler", [False, True])
def test_a_bert_without_the_nsp_head_exports_as_bert_for_masked_lm(tmp_path, vocab_file, pooler):
    """MLM-only pre-training (model.nsp_head=False, RoBERTa's recipe) had no export: 'this model
    has no Hugging Face class'. It is transformers' BertForMaskedLM, which loads it whole with
    our MLM logits; its pooler, where there is one, is BertModel's."""
    config = _mlm_only(pooler)
    model = M.BertForPreTraining(config, rngs=nnx.Rngs(3))
    perturb(model, 4)
    out = str(tmp_path / "mlm")
    bert.save_hf(model, vocab_file, out)
    assert json.loads(open(os.path.join(out, "config.json")).read())["architectures"] == [
        "BertForMaskedLM"
    ]
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(
        out, output_loading_info=True, attn_implementation="eager"
    )
    assert type(loaded).__name__ == "BertForMaskedLM" and not info["missing_keys"]
    expected = {"bert.pooler.dense.bias", "bert.pooler.dense.weight"} if pooler else set()
    assert set(info["unexpected_keys"]) == expected
    ids, mask, segments, positions = padded_batch(seed=5)
    with torch.no_grad():
        logits = loaded.eval()(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            token_type_ids=torch.tensor(segments, dtype=torch.long),
        ).logits.numpy()
    mlm, _ = ours_logits(model, ids, mask, segments, positions)
    np.testing.assert_allclose(mlm, logits[np.arange(len(ids))[:, None], positions], atol=1e-4)
    if pooler:
        base = transformers.BertModel.from_pretrained(out, attn_implementation="eager")
        np.testing.assert_array_equal(
            base.pooler.dense.weight.detach().numpy().T,
            np.asarray(model.bert.pooler.kernel.value),
        )
    again, report = bert.load_hf(out, config=config)
    assert report.unused == [] and report.initialized == []
    for a, b in zip(params_of(model), params_of(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("kind", ["classification", "regression", "tagging", "span"])
def test_a_task_model_without_the_pooler_exports_only_where_transformers_has_none(kind, tmp_path):
    """transformers' sequence classes read BERT's pooler: a classification or regression model
    of an encoder without one (model.pooler=False) is refused, not written for transformers to
    fill with a fresh pooler; tagging and QA, whose classes have no pooler, export and match."""
    from bert_jax.finetune import heads

    config = _mlm_only(pooler=False)
    task = heads.TaskModel(config, kind, 3, rngs=nnx.Rngs(0))
    out = str(tmp_path / "task")
    if kind in ("classification", "regression"):
        with pytest.raises(cli.UserError, match="without BERT's pooler"):
            heads.export_hf(task, ["a", "b", "c"], out, None)
        assert not os.path.exists(out)
        return
    heads.export_hf(task, ["a", "b", "c"], out, None)
    cls = {"tagging": "BertForTokenClassification", "span": "BertForQuestionAnswering"}[kind]
    _, info = getattr(transformers, cls).from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
