"""A tokenizer.json (byte-level BPE) through the trainer and fine-tuning: pre-training on records
data_prep wrote with it (the vocabulary size and special ids from the manifest, dynamic masking
with its [MASK]), fine-tuning from a Hugging Face directory that has only a tokenizer.json; its
files for an export (tokenizer.json + tokenizer_config.json) load in transformers with the same
ids."""

import os

import pytest

from bert_jax.finetune import train as ft_train
from bert_jax.hf import bert
from bert_jax.text import tokenizer_json
from bert_jax.training import pretrain, pretrained
from configs import tiny
from data_prep import instances, job, scaled
from support import finetune_data, tokenizer_files

pytestmark = pytest.mark.slow  # a pre-training run and a fine-tuning run


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return tokenizer_files.make("bpe", tmp_path_factory.mktemp("bpe") / "tokenizer.json", 600)


@pytest.fixture(scope="module")
def pretrained_run(bpe, testdata, tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    opts = instances.InstanceOptions(
        max_seq_length=64, max_predictions_per_seq=20, nsp=False, mask=False, masked_lm_prob=0.3
    )
    spec = job.JobSpec(
        (str(testdata / "pydocs_small.txt"),), opts, dupe_factor=1, eval_fraction=0.2
    )
    records = str(d / "records")
    scaled.run(spec, tokenizer_json.JsonTokenizer(bpe), records, progress=False)
    config = tiny.get_config()
    config.model.vocab_size = 0  # the tokenizer's 600 ids, from the manifest
    config.model.max_position_embeddings = 64
    config.data.train_files = config.data.eval_files = records
    config.data.read_threads = 1
    config.data.max_predictions_per_seq = 20  # scaled.run without data_prep's flags
    config.train.num_train_steps, config.train.log_every_steps = 4, 2
    config.eval.every_steps, config.eval.num_examples = 0, 16
    config.checkpoint.every_steps = 4
    config.mesh.num_devices = 1
    workdir = str(d / "workdir")
    result = pretrain.train_and_evaluate(config, workdir)
    return workdir, result


def sst2_config(tmp_path):
    config = finetune_data.make_config(
        train_file=finetune_data.sst2_file(tmp_path / "train.tsv", 64, 0),
        eval_files=finetune_data.sst2_file(tmp_path / "dev.tsv", 32, 1),
    )
    config.train.num_epochs = 1.0
    config.eval.at_start = False
    return config


def test_pretraining_on_tokenizer_json_records(pretrained_run, bpe):
    workdir, result = pretrained_run
    assert result["stopped"] == "done" and result["step"] == 4
    assert 0 < result["eval"]["mlm_loss_all"] < 20
    loaded = pretrained.load(workdir)
    assert isinstance(loaded.tokenizer, tokenizer_json.JsonTokenizer)
    assert loaded.vocab_file == bpe and loaded.config.vocab_size == 600


def test_fine_tuning_from_a_directory_with_only_a_tokenizer_json(pretrained_run, bpe, tmp_path):
    """A Hugging Face directory with a tokenizer.json and no vocab.txt (as ModernBERT's); our
    workdir's tokenizer is the same JsonTokenizer (test_pretraining_on_tokenizer_json_records)."""
    workdir, _ = pretrained_run
    hf_dir = tmp_path / "hf"
    bert.save_hf(pretrained.load(workdir).model(), None, str(hf_dir))
    bert.save_tokenizer(bpe, str(hf_dir), do_lower_case=False, model_max_length=64)
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(hf_dir))
    loaded = pretrained.load(str(hf_dir))
    assert isinstance(loaded.tokenizer, tokenizer_json.JsonTokenizer)
    theirs = ft_train.finetune(sst2_config(tmp_path), str(tmp_path / "ft_hf"), str(hf_dir))
    assert theirs["stopped"] == "done" and "accuracy" in theirs["eval"]["dev"]


def test_the_export_files_load_in_transformers_with_the_same_ids(bpe, tmp_path):
    transformers = pytest.importorskip("transformers")
    """The export's tokenizer files for a tokenizer.json with no companions of its own (as
    data_prep.vocab trains one): transformers' AutoTokenizer loads them with our special tokens
    named and the same ids."""
    ours = tokenizer_json.JsonTokenizer(bpe)
    bert.save_tokenizer(bpe, str(tmp_path), do_lower_case=False, model_max_length=8192)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert theirs.mask_token == "[MASK]" and theirs.cls_token_id == ours.cls_id
    assert theirs.pad_token_id == ours.pad_id and theirs.model_max_length == 8192
    for text in tokenizer_files.corpus_lines()[:50]:
        assert theirs(text)["input_ids"] == [ours.cls_id, *ours.encode(text), ours.sep_id]
