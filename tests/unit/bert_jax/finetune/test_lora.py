"""LoRA adapters: what they add, what trains, that merging keeps the outputs, and the HF export."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bert_jax import cli
from bert_jax.finetune import heads, lora
from bert_jax.model import encoder
from bert_jax.training import pretrained
from support.checkpoints import FLIPPED_PARAMS

TINY = encoder.BertConfig(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=32,
    type_vocab_size=2,
    initializer_range=0.2,
)
ATTENTION_TARGETS = ("query", "key", "value", "attention_output")
ALL_TARGETS = tuple(lora.TARGETS)


def inputs(batch=3, length=10, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, TINY.vocab_size, (batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, 7:] = 0  # some padding
    segments = np.zeros_like(ids)
    segments[:, 5:] = 1
    return jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(segments)


def randomize_adapters(model, seed=1):
    """B starts at zero (adapters do nothing); give it values so merging has something to do."""
    for i, (_, module) in enumerate(nnx.iter_modules(model)):
        if isinstance(module, nnx.LoRA):
            module.lora_b[...] = (
                jax.random.normal(jax.random.key(seed + i), module.lora_b[...].shape) * 0.3
            )


def adapted_model(kind="classification", targets=ALL_TARGETS, rank=4):
    model = heads.TaskModel(TINY, kind, 3, rngs=nnx.Rngs(0))
    lora.add_adapters(model.bert, targets, rank, 8.0, rngs=nnx.Rngs(1))
    return model


def test_fresh_adapters_change_nothing():
    plain = heads.TaskModel(TINY, "classification", 3, rngs=nnx.Rngs(0))
    adapted = adapted_model()
    # The plain model projects query/key/value in one stacked matmul, the adapted one in three
    # (each wrapped by its adapter), so they agree to float32 rounding, not bit for bit.
    np.testing.assert_allclose(plain(*inputs()), adapted(*inputs()), rtol=0, atol=1e-6)


def summary(model) -> dict[str, int]:
    """{'total', 'trainable', 'adapters', 'head'} parameter counts; 'trainable' is what a LoRA
    run trains (adapters and head)."""
    return {
        "total": lora.count(model),
        "trainable": lora.count(model, lora.TRAINABLE),
        "adapters": lora.count(model, nnx.LoRAParam),
        "head": lora.count(model, nnx.PathContains("head")),
    }


def test_trainable_parameter_counts():
    model = adapted_model(targets=ATTENTION_TARGETS, rank=4)
    counts = summary(model)
    h, layers = TINY.hidden_size, TINY.num_hidden_layers
    assert counts["adapters"] == layers * 4 * 4 * (h + h)  # 4 projections, r * (in + out)
    assert counts["head"] == h * 3 + 3
    assert counts["trainable"] == counts["adapters"] + counts["head"]
    base = lora.count(heads.TaskModel(TINY, "classification", 3, rngs=nnx.Rngs(0)))
    assert counts["total"] == base + counts["adapters"]
    ffn = summary(adapted_model(targets=("intermediate", "output"), rank=4))["adapters"]
    assert ffn == layers * 2 * 4 * (h + TINY.intermediate_size)


def test_bert_base_rank8_counts():
    """The figure the docs quote: BERT-base, r=8 on q/k/v/o, a 2-class head."""
    base = encoder.BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
    )

    def build():
        model = heads.TaskModel(base, "classification", 2, rngs=nnx.Rngs(0))
        lora.add_adapters(model.bert, ATTENTION_TARGETS, 8, 16.0, rngs=nnx.Rngs(1))
        return model

    counts = summary(nnx.eval_shape(build))
    assert counts["adapters"] == 12 * 4 * 8 * (768 + 768) == 589_824
    assert counts["trainable"] == 589_824 + 1_538
    assert counts["total"] == 109_483_778 + 589_824  # BertForSequenceClassification's 109,483,778


def test_merge_gives_the_same_outputs_and_plain_structure():
    model = adapted_model()
    randomize_adapters(model)
    before = model(*inputs())
    plain_paths = {
        p
        for p, _ in nnx.to_flat_state(
            nnx.state(heads.TaskModel(TINY, "classification", 3, rngs=nnx.Rngs(0)), nnx.Param)
        )
    }
    assert lora.merge_adapters(model) == TINY.num_hidden_layers * len(ALL_TARGETS)
    after = model(*inputs())
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)
    assert {p for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))} == plain_paths
    assert lora.count(model, nnx.LoRAParam) == 0


def test_adapters_shard_like_the_kernels_they_adapt():
    model = adapted_model(targets=("query", "attention_output", "intermediate"))
    specs = nnx.to_pure_dict(nnx.get_partition_spec(nnx.state(model, nnx.LoRAParam)))
    layer = specs["bert"]["layers"][0]
    assert tuple(layer["attention"]["query"]["lora"]["lora_a"]) == ("embed", None)
    assert tuple(layer["attention"]["query"]["lora"]["lora_b"]) == (None, "heads")
    assert tuple(layer["attention"]["output"]["lora"]["lora_b"]) == (None, "embed")
    assert tuple(layer["intermediate"]["lora"]["lora_b"]) == (None, "mlp")


def test_bad_lora_settings_get_clear_errors():
    model = heads.TaskModel(TINY, "classification", 3, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="choose from"):
        lora.add_adapters(model.bert, ("qkv",), 4, 8.0, rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        lora.add_adapters(model.bert, ("query",), 0, 8.0, rngs=nnx.Rngs(1))
    lora.add_adapters(model.bert, ("query",), 2, 8.0, rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="already has a LoRA adapter"):
        lora.add_adapters(model.bert, ("query",), 2, 8.0, rngs=nnx.Rngs(1))


@pytest.mark.parametrize(
    "kind, auto_class",
    [
        ("classification", "AutoModelForSequenceClassification"),
        ("regression", "AutoModelForSequenceClassification"),
        ("tagging", "AutoModelForTokenClassification"),
        ("span", "AutoModelForQuestionAnswering"),
    ],
)
def test_export_merges_and_transformers_gives_the_same_outputs(
    tmp_path, vocab_file, kind, auto_class
):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = adapted_model(kind)
    randomize_adapters(model)
    ours = model(*inputs())
    labels = ("x", "y", "z") if kind in ("classification", "tagging") else ()
    config = heads.export_hf(model, labels, str(tmp_path / "export"), vocab_file)
    assert lora.count(model, nnx.LoRAParam) > 0  # exporting merged a copy, not the model itself
    hf_model = getattr(transformers, auto_class).from_pretrained(str(tmp_path / "export")).eval()
    if labels:
        assert hf_model.config.id2label == dict(enumerate(labels)) and config["label2id"]["y"] == 1
    ids, mask, segments = (torch.tensor(np.asarray(x), dtype=torch.long) for x in inputs())
    with torch.no_grad():
        out = hf_model(input_ids=ids, attention_mask=mask, token_type_ids=segments)
    if kind == "span":
        np.testing.assert_allclose(out.start_logits.numpy(), ours[0], atol=1e-4)
        np.testing.assert_allclose(out.end_logits.numpy(), ours[1], atol=1e-4)
    else:
        theirs = out.logits.numpy()
        np.testing.assert_allclose(
            theirs[:, 0] if kind == "regression" else theirs, ours, atol=1e-4
        )


def test_export_of_a_plain_model_needs_no_adapters(tmp_path):
    model = heads.TaskModel(
        dataclasses.replace(TINY, num_hidden_layers=1), "classification", 2, rngs=nnx.Rngs(0)
    )
    config = heads.export_hf(model, ("0", "1"), str(tmp_path / "export"), None)
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert not (tmp_path / "export" / "vocab.txt").exists()


def test_mean_pooling_is_refused_for_bert():
    """BERT's task models read the pooler: a mean pooling asked of one would be ignored."""
    config = dataclasses.replace(TINY, classifier_pooling="mean")
    with pytest.raises(cli.UserError, match="classifier_pooling='mean' is for a ModernBERT"):
        heads.TaskModel(config, "classification", 2, rngs=nnx.Rngs(0))


def test_init_from_a_pretraining_workdir_of_ours(tmp_path, vocab_file, flip_bytes):
    """--init may be a pre-training workdir: the encoder comes from its latest checkpoint, the
    vocabulary from what its data recorded; a damaged checkpoint is refused."""
    import grain

    from bert_jax.finetune import runs
    from bert_jax.training import checkpoints, pretrain
    from configs import tiny
    from configs.finetune import base

    config = tiny.get_config()
    config.mesh.num_devices = 1
    config.data.vocab_file, config.data.do_lower_case = vocab_file, False  # as resolve records
    setup = pretrain.make_setup(config)
    state = pretrain.jit_init(setup, seed=3)()
    manager = checkpoints.make_manager(str(tmp_path / "pretrain"), async_save=False)
    checkpoints.save(manager, 7, state, iter(grain.MapDataset.range(4).to_iter_dataset()), config)
    manager.close()

    encoder = pretrained.load(str(tmp_path / "pretrain"), overrides={"hidden_dropout_prob": 0.0})
    assert encoder.config.hidden_dropout_prob == 0.0 and encoder.config.hidden_size == 32
    assert (encoder.vocab_file, encoder.do_lower_case) == (vocab_file, False)
    model = runs.build_model("tagging", ("O", "B", "I"), encoder, base.get_config().lora, seed=0)
    ours = nnx.to_pure_dict(nnx.state(model.bert, nnx.Param))
    jax.tree.map(np.testing.assert_array_equal, ours, jax.device_get(state["params"]["bert"]))

    with pytest.raises(ValueError, match="cannot be changed on a pre-trained model"):
        pretrained.load(str(tmp_path / "pretrain"), overrides={"hidden_size": 64})
    with pytest.raises(ValueError, match="no pre-trained model given"):
        pretrained.load("")
    flip_bytes(tmp_path / "pretrain" / "checkpoints" / "7")
    with pytest.raises(
        checkpoints.DamagedCheckpoint,
        match=rf"checkpoints/7 is damaged: {FLIPPED_PARAMS}",
    ):
        pretrained.load(str(tmp_path / "pretrain"))


# --- The whole LoRA path: train, merge, export, reload with transformers ---------------------


def _task_files(kind, tmp_path):
    """(config.data fields, the AutoModel class) with small synthetic train and test files."""
    from support import finetune_data as data

    if kind == "classification":
        make, fields = data.sst2_file, {"format": "glue", "layout": "sst2"}
    elif kind == "regression":
        make, fields = data.stsb_file, {"format": "glue", "layout": "stsb"}
    elif kind == "tagging":
        make, fields = data.conll_file, {"format": "conll"}
    else:
        make = data.squad_file
        fields = {"format": "squad", "doc_stride": 8, "max_query_length": 8}
    ext = {"glue": "tsv", "conll": "txt", "squad": "json"}[fields["format"]]
    fields["train_file"] = make(tmp_path / f"train.{ext}", 32, 0)
    fields["test_file"] = make(tmp_path / f"test.{ext}", 16, 1)
    return fields


@pytest.mark.parametrize("kind", ["classification", "regression", "tagging", "span"])
def test_lora_run_exports_a_model_that_predicts_like_ours(tiny_hf, tmp_path, kind):
    """A LoRA run with the default export on: the exported transformers model, run on the test
    file's inputs and put through the same post-processing, writes our prediction file."""
    import transformers
    from safetensors.numpy import load_file

    from bert_jax.finetune import runs, train
    from support.finetune_data import make_config

    config = make_config(**_task_files(kind, tmp_path))
    config.lora.rank = 2
    config.optim.learning_rate = 2e-2  # a few steps that move the adapters visibly
    config.train.num_epochs = 1.0
    config.eval.at_start = False
    config.export = True
    config.mesh.num_devices = 1
    workdir = tmp_path / "work"
    result = train.finetune(config, str(workdir), tiny_hf)
    assert result["export"] == str(workdir / "export") and result["predictions"]

    # The adapters were merged: the adapted kernels moved away from the pre-trained ones.
    exported = load_file(str(workdir / "export" / "model.safetensors"))
    pretrained_ = load_file(f"{tiny_hf}/model.safetensors")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    assert np.max(np.abs(exported[name] - pretrained_[name])) > 1e-3

    # transformers' outputs for the test file's inputs, written by the task as ours were.
    run = runs.prepare(config, tiny_hf)
    ds = runs.encode_file(run, config.data.test_file)
    auto = {
        "classification": "AutoModelForSequenceClassification",
        "regression": "AutoModelForSequenceClassification",
        "tagging": "AutoModelForTokenClassification",
        "span": "AutoModelForQuestionAnswering",
    }[kind]
    hf_model = getattr(transformers, auto).from_pretrained(str(workdir / "export")).eval()
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        out = hf_model(
            **{
                hf_name: torch.from_numpy(ds.arrays[ours].astype(np.int64))
                for hf_name, ours in (
                    ("input_ids", "input_ids"),
                    ("attention_mask", "input_mask"),
                    ("token_type_ids", "segment_ids"),
                )
            }
        )
    if kind == "span":
        outputs = (out.start_logits.numpy(), out.end_logits.numpy())
    else:
        outputs = out.logits.numpy()[:, 0] if kind == "regression" else out.logits.numpy()
    theirs = tmp_path / ("theirs" + os.path.splitext(result["predictions"])[1])
    run.task.write(str(theirs), ds, outputs, run.labels)
    with open(result["predictions"]) as a, open(theirs) as b:
        ours_text, theirs_text = a.read(), b.read()
    if kind == "regression":  # scores are written to 4 decimals: compare the numbers
        rows = [[r.split("\t") for r in t.splitlines()[1:]] for t in (ours_text, theirs_text)]
        np.testing.assert_allclose(
            [float(v) for _, v in rows[0]], [float(v) for _, v in rows[1]], atol=2e-4
        )
    else:
        assert ours_text == theirs_text


@pytest.mark.parametrize(
    "override, names",
    [
        ("query,value", ("query", "value")),  # --config.lora.targets=query,value
        (("query, value",), ("query", "value")),
        (("query", "value"), ("query", "value")),
        ("query", ("query",)),
        ("", ()),
    ],
)
def test_target_names_split_a_comma_separated_override(override, names):
    """As --config.data.labels=a,b: the spelling docs/finetuning.md uses for list fields."""
    assert lora.target_names(override) == names
    assert not lora.problems(names, 4, 16.0) if names else lora.problems(names, 4, 16.0)
