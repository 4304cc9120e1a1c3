"""Issue 23's cases for the bad-input sweep (tests/e2e/test_bad_input_sweep.py): the other inputs.

Damaged model directories (config.json, tokenizer files, safetensors headers and data, pickles
torch refuses, weight indexes that leave --model) through embed and fine-tuning; MediaWiki dumps
in UTF-16/32; over-long lines; directories and named pipes where files belong; negative seeds;
outputs that cannot be written; resumes with another model size. The command lines and helpers
are tests/support/sweep_integrity.py's; `make_files(d)` writes this module's files.
"""

import bz2
import datetime
import gzip
import io
import json
import os
import random
import shutil

from bert_jax.data.contract import manifest
from support.golden import REPO
from support.sweep_integrity import (
    DECODE,
    EMBED,
    EXPORT,
    FINETUNE,
    PREP,
    PREP_FLAGS,
    TRAIN,
    VOCAB,
    _id,
    _write,
)

# --- model directories -----------------------------------------------------------------------


MODEL_EXPECT = {  # a damaged copy of a model directory: what the error line must name
    "config not JSON": "config.json",
    "config an array": "config.json",
    "config UTF-16": "config.json",
    "config field a word": "config.json",
    "config without layers": ("config.json", "num_hidden_layers"),
    "tokenizer_config not JSON": "tokenizer_config.json",
    "tokenizer.json not JSON": "tokenizer.json",
    "safetensors header cut": "model.safetensors",
    "safetensors header length huge": "model.safetensors",
    "safetensors empty": "model.safetensors",
    "safetensors random": "model.safetensors",
    "safetensors data cut": "model.safetensors",
    "safetensors header not JSON": "model.safetensors",
    "bin pickles a class": "pytorch_model.bin",
    "bin a list": "pytorch_model.bin",
    "bin cut": "pytorch_model.bin",
    "bin random": "pytorch_model.bin",
    "index absolute path": ("model.safetensors.index.json", "outside"),
    "index ../": ("model.safetensors.index.json", "outside"),
    "index sub/../../": ("model.safetensors.index.json", "outside"),
    "index not JSON": "model.safetensors.index.json",
    "index without weight_map": ("model.safetensors.index.json", "weight_map"),
    "index shard missing": "model-00001.safetensors",
}


def _model_dirs(d, hf: str) -> None:
    """Copies of a Hugging Face model directory, one per MODEL_EXPECT entry, each damaged one
    way, and hf_index_works (a sharded index of its own file). Files not changed are hard links."""
    import safetensors
    import torch

    config = json.loads(open(f"{hf}/config.json").read())
    weights = f"{hf}/model.safetensors"
    with open(weights, "rb") as f:
        whole = f.read()
    header_len = int.from_bytes(whole[:8], "little")
    made = []

    def variant(name, files, keep_weights=True):
        target = d / f"hf_{_id(name)}"
        os.makedirs(target)
        for f in os.listdir(hf):
            if f != "model.safetensors" or keep_weights:
                os.link(f"{hf}/{f}", target / f)
        for f, data in files.items():
            if os.path.exists(target / f):
                os.remove(target / f)
            if data is not None:
                _write(target / f, data)
        made.append(name)

    def config_with(**changes):
        return json.dumps({k: v for k, v in {**config, **changes}.items() if v is not None})

    variant("config not JSON", {"config.json": '{"hidden_size": 32,'})
    variant("config an array", {"config.json": "[32, 2]"})
    variant("config UTF-16", {"config.json": json.dumps(config).encode("utf-16")})
    variant("config field a word", {"config.json": config_with(hidden_size="big")})
    variant("config without layers", {"config.json": config_with(num_hidden_layers=None)})
    variant("tokenizer_config not JSON", {"tokenizer_config.json": "{"})
    variant("tokenizer.json not JSON", {"vocab.txt": None, "tokenizer.json": '{"model": '})
    st = "model.safetensors"
    variant("safetensors header cut", {st: whole[:100]})
    variant("safetensors header length huge", {st: (1 << 40).to_bytes(8, "little") + whole[8:]})
    variant("safetensors empty", {st: b""})
    variant("safetensors random", {st: random.Random(5).randbytes(5000)})
    variant("safetensors data cut", {st: whole[: 8 + header_len + 1000]})
    variant(
        "safetensors header not JSON",
        {st: whole[:8] + b"{" * header_len + whole[8 + header_len :]},
    )
    state = {"bert.embeddings.word_embeddings.weight": torch.zeros(4, 2)}
    pickled = {}
    for name, obj in (
        ("class", {**state, "when": datetime.date(2020, 1, 1)}),  # weights_only refuses it
        ("list", [torch.zeros(2)]),
        ("state", state),
    ):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        pickled[name] = buffer.getvalue()
    pt = "pytorch_model.bin"
    variant("bin pickles a class", {pt: pickled["class"]}, keep_weights=False)
    variant("bin a list", {pt: pickled["list"]}, keep_weights=False)
    variant("bin cut", {pt: pickled["state"][:300]}, keep_weights=False)
    variant("bin random", {pt: random.Random(6).randbytes(4000)}, keep_weights=False)
    index = "model.safetensors.index.json"
    with safetensors.safe_open(weights, "np") as f:
        names = list(f.keys())

    def indexed(target):
        return json.dumps({"metadata": {}, "weight_map": dict.fromkeys(names, target)})

    for name, target in (
        ("index absolute path", os.path.abspath(weights)),
        ("index ../", "../hf/model.safetensors"),
        ("index sub/../../", "sub/../../hf/model.safetensors"),
        ("index shard missing", "model-00001.safetensors"),
    ):
        variant(name, {index: indexed(target)}, keep_weights=False)
    variant("index not JSON", {index: "{"}, keep_weights=False)
    variant("index without weight_map", {index: "{}"}, keep_weights=False)
    assert sorted(made) == sorted(MODEL_EXPECT)
    # A sharded checkpoint whose index names its own file: must work like the single file.
    target = d / "hf_index_works"
    os.makedirs(target)
    for f in os.listdir(hf):
        os.link(f"{hf}/{f}", target / (f if f != st else "w-1-of-1.safetensors"))
    _write(target / index, indexed("w-1-of-1.safetensors"))


# --- text inputs -----------------------------------------------------------------------------


def _wiki_files(d, dump_bz2: str) -> None:
    """The sample dump with an XML declaration, in UTF-8 (the reference) and UTF-16/32."""
    text = bz2.decompress(open(dump_bz2, "rb").read()).decode("utf-8")

    def declared(encoding):
        return f'<?xml version="1.0" encoding="{encoding}"?>\n' + text

    utf16 = declared("UTF-16").encode("utf-16")
    files = {
        "wiki8.xml": declared("UTF-8").encode(),
        "wiki16.xml": utf16,
        "wiki16be.xml": "\ufeff".encode("utf-16-be") + declared("UTF-16").encode("utf-16-be"),
        "wiki16le-nobom.xml": declared("UTF-16").encode("utf-16-le"),
        "wiki16.xml.bz2": bz2.compress(utf16),
        "wiki16.xml.gz": gzip.compress(utf16, mtime=0),
        "wiki32.xml": declared("UTF-32").encode("utf-32"),
        "xml16.xml": '<?xml version="1.0" encoding="UTF-16"?>\n<catalog/>\n'.encode("utf-16"),
    }
    for name, data in files.items():
        _write(d / name, data)


def _long_lines(d, corpus: bytes) -> None:
    line = b"word " * ((9 << 20) // 5)  # 9 MB, past the 8 MB limit, with no line break
    _write(d / "long.txt", line)
    _write(d / "long.gz", gzip.compress(line, compresslevel=1, mtime=0))
    _write(d / "long_one.txt", corpus + b"\n" + line + b"\n\n" + corpus)


def make_files(d) -> None:
    """Writes this module's files under `d`, the sweep's directory (which holds hf, run,
    corpus.txt, ...)."""
    _model_dirs(d, str(d / "hf"))
    os.mkfifo(d / "pipe")
    _long_lines(d, (d / "corpus.txt").read_bytes())
    repo = REPO
    _wiki_files(d, f"{repo}/examples/data/enwiki-sample-pages-articles-multistream.xml.bz2")
    for name in RESIZED:
        shutil.copytree(d / "run", d / f"resume_{name}")


# --- checks of inputs that must work ---------------------------------------------------------


def _prep_as(reference: str):
    """data_prep's records from this input are those from `reference` (same flags)."""

    def check(ctx, o, stdout):
        args = (
            f"--input={ctx['d']}/{reference} --vocab_file={ctx['vocab']} --output_dir={o}/ref "
            + PREP_FLAGS
        )
        status, _, err = ctx["server"].run("data_prep.main", args.split())
        assert status == 0, err
        got = manifest.read(os.path.join(o, "out"))["shards"]
        want = manifest.read(os.path.join(o, "ref"))["shards"]
        assert [s["md5"] for s in got["train"]] == [s["md5"] for s in want["train"]]
        assert got["train"][0]["instances"] > 0

    return check


def _vocab_as(reference: str):
    """The vocabulary is the one trained on `reference`, up to the entries tied at the cut and
    their order (Hugging Face's WordPiece trainer breaks ties in hash order, docs/data_prep.md):
    a dump read wrongly would share few of its entries."""

    def check(ctx, o, stdout):
        args = f"--input={ctx['d']}/{reference} --output={o}/ref.txt --vocab_size=400"
        status, _, err = ctx["server"].run("data_prep.vocab", args.split())
        assert status == 0, err
        got, want = (open(f"{o}/{n}").read().splitlines() for n in ("v.txt", "ref.txt"))
        assert len(got) == len(want) and got[:5] == want[:5]  # the special tokens first
        assert len(set(got) ^ set(want)) <= len(want) // 20, set(got) ^ set(want)

    return check


def _long_line_counted(ctx, o, stdout):
    assert "long_lines': 1" in stdout, stdout
    assert manifest.read(os.path.join(o, "out"))["shards"]["train"][0]["instances"] > 0


def _embeds_as_hf(ctx, o, stdout):
    import numpy as np

    args = f"--model={ctx['d']}/hf --input={ctx['d']}/clean.txt --output={o}/ref.npz"
    status, _, err = ctx["server"].run("bert_jax.embed", args.split())
    assert status == 0, err
    got, want = np.load(f"{o}/e.npz"), np.load(f"{o}/ref.npz")
    for key in want.files:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


# --- the cases: see TRAINER_RUNS in tests/support/sweep_integrity.py --------------------------

MODELS_FINETUNED = (
    "config not JSON",
    "config field a word",
    "tokenizer.json not JSON",
    "safetensors header cut",
    "safetensors data cut",
    "bin pickles a class",
    "index ../",
    "index without weight_map",
)


RESIZED = {  # a resume with another model: the config.model field the error must name
    "wider": ("--config.model.hidden_size=64 --config.model.intermediate_size=128", "hidden_size"),
    "deeper": ("--config.model.num_hidden_layers=3", "num_hidden_layers"),
    "longer": ("--config.model.max_position_embeddings=256", "max_position_embeddings"),
}


def _models() -> list:
    cases = []
    for name, names in MODEL_EXPECT.items():
        cases.append((f"embed: model {name}", f"{EMBED} --model={{d}}/hf_{_id(name)}", names))
        if name in MODELS_FINETUNED:
            cases.append(
                (f"finetune: init {name}", f"{FINETUNE} --init={{d}}/hf_{_id(name)}", names)
            )
    return cases + [
        (
            "embed: a sharded index of its own files works",
            f"{EMBED} --model={{d}}/hf_index_works",
            _embeds_as_hf,
        ),
    ]


PIPE, DIR = ("pipe", "named pipe"), ("dir", "is a directory")
PATHS = [
    ("input: a named pipe", f"{PREP} --input={{d}}/pipe", PIPE),
    ("vocab_file: a named pipe", f"{PREP} --vocab_file={{d}}/pipe", PIPE),
    ("decode: input a named pipe", f"{DECODE}{{d}}/pipe", PIPE),
    (
        "decode: vocab a named pipe",
        f"{DECODE}{{d}}/records/{{shard}} --vocab_file={{d}}/pipe",
        PIPE,
    ),
    ("decode: vocab a directory", f"{DECODE}{{d}}/records/{{shard}} --vocab_file={{d}}/dir", DIR),
    ("vocab: input a named pipe", f"{VOCAB} --input={{d}}/pipe", PIPE),
    ("train: train_files a named pipe", f"{TRAIN} --config.data.train_files={{d}}/pipe", PIPE),
    ("train: vocab_file a named pipe", f"{TRAIN} --config.data.vocab_file={{d}}/pipe", PIPE),
    ("train: vocab_file a directory", f"{TRAIN} --config.data.vocab_file={{d}}/dir", DIR),
    ("embed: input a named pipe", f"{EMBED} --input={{d}}/pipe", PIPE),
    ("embed: vocab a named pipe", f"{EMBED} --vocab_file={{d}}/pipe", PIPE),
    ("export: vocab a named pipe", f"{EXPORT} --vocab_file={{d}}/pipe", PIPE),
    ("export: vocab a directory", f"{EXPORT} --vocab_file={{d}}/dir", DIR),
    ("finetune: train file a named pipe", f"{FINETUNE} --config.data.train_file={{d}}/pipe", PIPE),
    ("finetune: train file a directory", f"{FINETUNE} --config.data.train_file={{d}}/dir", DIR),
    ("finetune: eval file a directory", f"{FINETUNE} --config.data.eval_files={{d}}/dir", DIR),
]

SEEDS = [
    ("random_seed negative", f"{PREP} --random_seed=-1", "random_seed"),
    ("train: seed negative", f"{TRAIN} --config.train.seed=-1", "train.seed"),
    ("train: seed past 2**31", f"{TRAIN} --config.train.seed=4294967296", "train.seed"),
    ("finetune: seed negative", f"{FINETUNE} --config.train.seed=-3", "train.seed"),
]

READ_ONLY = [  # /sys is a read-only filesystem, also to root
    ("output_dir read-only", f"{PREP} --output_dir=/sys/out", "/sys/out"),
    ("vocab: output read-only", f"{VOCAB} --output=/sys/v.txt", "/sys"),
    ("vocab: sp output read-only", f"{VOCAB} --output=/sys/sp --model_type=sentencepiece", "/sys"),
    ("embed: output read-only", f"{EMBED} --output=/sys/e.npz", "/sys"),
    ("export: output read-only", f"{EXPORT} --output_dir=/sys/hf", "/sys/hf"),
    ("train: workdir read-only", f"{TRAIN} --workdir=/sys/run", "/sys/run"),
    ("finetune: workdir read-only", f"{FINETUNE} --workdir=/sys/ft", "/sys/ft"),
]

TEXT = [
    ("input one 9 MB line", f"{PREP} --input={{d}}/long.txt", ("long.txt", "8 MB")),
    ("input one 9 MB line gzipped", f"{PREP} --input={{d}}/long.gz", ("long.gz", "8 MB")),
    ("vocab: input one 9 MB line", f"{VOCAB} --input={{d}}/long.txt", ("long.txt", "8 MB")),
    (
        "input a 9 MB line among others is counted",
        f"{PREP} --input={{d}}/long_one.txt",
        _long_line_counted,
    ),
    ("input UTF-16 dump works", f"{PREP} --input={{d}}/wiki16.xml", _prep_as("wiki8.xml")),
    ("input UTF-16BE dump works", f"{PREP} --input={{d}}/wiki16be.xml", _prep_as("wiki8.xml")),
    (
        "input UTF-16 dump without BOM works",
        f"{PREP} --input={{d}}/wiki16le-nobom.xml",
        _prep_as("wiki8.xml"),
    ),
    ("input UTF-16 dump bz2 works", f"{PREP} --input={{d}}/wiki16.xml.bz2", _prep_as("wiki8.xml")),
    ("input UTF-16 dump gzip works", f"{PREP} --input={{d}}/wiki16.xml.gz", _prep_as("wiki8.xml")),
    ("vocab: UTF-16 dump works", f"{VOCAB} --input={{d}}/wiki16.xml", _vocab_as("wiki8.xml")),
    ("input UTF-32 dump", f"{PREP} --input={{d}}/wiki32.xml", ("wiki32.xml", "iconv -f UTF-32")),
    ("input UTF-16 XML not a dump", f"{PREP} --input={{d}}/xml16.xml", ("xml16.xml", "<catalog>")),
]

RESUME = [
    (
        f"train: resume {name}",
        f"{TRAIN} --workdir={{d}}/resume_{name} {flags}",
        (f"resume_{name}", f"config.model.{field}"),
    )
    for name, (flags, field) in RESIZED.items()
]

CASES = [*_models(), *PATHS, *SEEDS, *READ_ONLY, *TEXT, *RESUME]
