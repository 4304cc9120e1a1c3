"""Contextual embeddings: the same states as transformers' BertModel, from HF dirs and workdirs."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

from bert_jax import cli, embed
from bert_jax.model import encoder as M
from configs import tiny
from support.golden import REPO

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = [
    "Hello, world!",
    "",
    "The naïve café's résumé was unbelievably long " * 3,
    "BERT",
    "a b c d",
    "Zürich",
]
N = 16


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, vocab_file):
    """A random transformers BertForPreTraining plus its tokenizer files, as a hub download has."""
    torch.manual_seed(0)
    ours = M.BertConfig.from_config_dict(tiny.get_config().model)  # bert-base-uncased's vocab
    shape = {k: getattr(ours, k) for k in M.SHAPE_FIELDS} | {"max_position_embeddings": 64}
    cfg = transformers.BertConfig(**shape, attn_implementation="eager")
    model = transformers.BertForPreTraining(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = str(tmp_path_factory.mktemp("hf_embed"))
    model.save_pretrained(path)
    transformers.BertTokenizer(vocab_file, do_lower_case=True).save_pretrained(path)
    return path, model.eval()


@pytest.fixture(scope="module")
def ours(hf_dir):
    model, tokenizer = embed.load_encoder(hf_dir[0])
    return embed.embed_texts(model, tokenizer, TEXTS, max_seq_length=N, batch_size=4)


def test_embeddings_match_transformers(hf_dir, ours):
    path, model = hf_dir
    tok = transformers.AutoTokenizer.from_pretrained(path)
    enc = tok(TEXTS, padding="max_length", truncation=True, max_length=N, return_tensors="np")
    np.testing.assert_array_equal(ours["input_ids"], enc["input_ids"])
    np.testing.assert_array_equal(ours["attention_mask"], enc["attention_mask"])
    with torch.no_grad():
        ref = model.bert(
            input_ids=torch.tensor(enc["input_ids"]),
            attention_mask=torch.tensor(enc["attention_mask"]),
        )
    real = enc["attention_mask"].astype(bool)
    assert ours["last_hidden_state"].shape == (len(TEXTS), N, 32)
    np.testing.assert_allclose(
        ours["last_hidden_state"][real], ref.last_hidden_state.numpy()[real], atol=1e-4, rtol=0
    )
    np.testing.assert_allclose(ours["pooled"], ref.pooler_output.numpy(), atol=1e-4, rtol=0)
    assert ours["input_ids"][1, :3].tolist() == [101, 102, 0]  # an empty line: [CLS] [SEP]
    assert ours["attention_mask"][2].all()  # the long line was cut to N tokens


def test_cli_writes_the_npz(hf_dir, ours, tmp_path, vocab_file):
    # The fixture's directory has transformers 5's tokenizer.json only; this one a vocab.txt.
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf_dir[0], name), model_dir / name)
    shutil.copy(vocab_file, model_dir / "vocab.txt")
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out.npz"
    proc = subprocess.run(  # --output=NAME writes NAME.npz, as np.savez does, and says so
        [
            sys.executable,
            "-m",
            "bert_jax.embed",
            f"--model={model_dir}",
            f"--input={tmp_path / 'in.txt'}",
            f"--output={tmp_path / 'out'}",
            f"--max_seq_length={N}",
            "--batch_size=5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"wrote {out}: "), proc.stdout  # not the name without .npz
    got = np.load(out)
    assert sorted(got.files) == ["attention_mask", "input_ids", "last_hidden_state", "pooled"]
    for key, value in ours.items():
        np.testing.assert_allclose(got[key], value, atol=1e-6, err_msg=key)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax.embed",
            f"--model={hf_dir[0]}",
            f"--input={tmp_path / 'missing.txt'}",
            f"--output={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
    # --output=in writes in.npz: a text file of that name, the input, is refused, not replaced.
    text = tmp_path / "in.npz"
    text.write_text("a text\n", encoding="utf-8")
    clash = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax.embed",
            f"--model={hf_dir[0]}",
            f"--input={text}",
            f"--output={tmp_path / 'in'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert clash.returncode == 2 and "would replace that input" in clash.stderr, clash.stderr
    assert text.read_text(encoding="utf-8") == "a text\n"


def test_a_workdir_trained_with_cudnn_attention_embeds_on_a_cpu(
    tmp_path, vocab_file, save_checkpoint
):
    """attention_impl='cudnn' saved by a GPU run is that machine's kernel choice: elsewhere the
    model loads with 'auto' (it was "cuDNN is not detected", with no flag to change it), and a
    step forced to cuDNN off a GPU is one error line."""
    config = tiny.get_config()
    config.model.attention_impl = "cudnn"
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(4))
    save_checkpoint(tmp_path, model, config, step=3)
    loaded, tokenizer = embed.load_encoder(str(tmp_path), vocab_file=vocab_file)
    out = embed.embed_texts(loaded, tokenizer, TEXTS[:2], max_seq_length=N)
    assert np.isfinite(out["last_hidden_state"]).all()
    with pytest.raises(
        cli.UserError, match="runs on a GPU only, and this step is compiled for cpu"
    ):
        model.bert(out["input_ids"], out["attention_mask"], np.zeros_like(out["input_ids"]))


def test_embeddings_from_a_training_workdir(tmp_path, vocab_file, save_checkpoint, flip_bytes):
    config = tiny.get_config()
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(4))
    save_checkpoint(tmp_path, model, config, step=3)
    with pytest.raises(ValueError, match="pass --vocab_file"):
        embed.load_encoder(str(tmp_path))
    loaded, tokenizer = embed.load_encoder(str(tmp_path), vocab_file=vocab_file)
    out = embed.embed_texts(loaded, tokenizer, TEXTS[:2], max_seq_length=N)
    seq, pooled = model.bert(
        out["input_ids"], out["attention_mask"], np.zeros_like(out["input_ids"])
    )
    np.testing.assert_allclose(out["last_hidden_state"], seq, atol=1e-5)
    np.testing.assert_allclose(out["pooled"], pooled, atol=1e-5)
    # A damaged step is refused, naming it (the user asked for that model: no fallback).
    flip_bytes(tmp_path / "checkpoints" / "3")
    with pytest.raises(ValueError, match=r"checkpoints/3 is damaged: .* no other step is saved"):
        embed.load_encoder(str(tmp_path), vocab_file=vocab_file)


def test_bad_arguments_say_what_to_fix(hf_dir, tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        embed.load_encoder(str(tmp_path / "nope"))
    model, tokenizer = embed.load_encoder(hf_dir[0])
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings 64"):
        embed.embed_texts(model, tokenizer, TEXTS, max_seq_length=65)
    with pytest.raises(ValueError, match="at least 3 needed"):  # room for one token of text
        embed.embed_texts(model, tokenizer, TEXTS, max_seq_length=2)


def test_rows_are_the_lines_wc_counts_whatever_the_text_holds(tmp_path):
    """Row i is line i: lines end at "\\n" (or "\\r\\n") only. Form feeds, U+2028/U+2029, NEL,
    a lone carriage return and the other characters str.splitlines() breaks at are text, not
    extra rows that shift every later row against the input's lines."""
    texts = ["a\x0cb", "c\u2028d", "e\x85f", "g\rh", "i\x1cj\x1dk\x1el", "m\vn", "", "last"]
    path = tmp_path / "texts.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(texts).encode() + b"\n")
    assert embed.read_lines(str(path)) == texts


def test_a_model_saved_without_its_pooler_is_said(hf_dir, tmp_path, vocab_file, capsys):
    """A task model's directory (BertForTokenClassification, BertForQuestionAnswering: no pooler
    layer) has no trained pooler: `pooled` then comes from a fresh random one, which transformers
    warns about and embed said nothing of. One warning line; a BertForPreTraining's, none."""
    config = transformers.BertConfig.from_pretrained(hf_dir[0])
    path = str(tmp_path / "tagger")
    transformers.BertForTokenClassification(config).save_pretrained(path)
    shutil.copy(vocab_file, os.path.join(path, "vocab.txt"))
    capsys.readouterr()
    embed.load_encoder(path)
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and len(err.splitlines()) == 1, err
    assert "pooler" in err and "pooled" in err
    embed.load_encoder(hf_dir[0])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_the_npz_has_the_mode_the_umask_gives_any_file(tmp_path, umask):
    """The .npz was written through mkstemp and kept its 0600: other users could not read it."""
    previous = os.umask(umask)
    try:
        embed._save_npz(str(tmp_path / "e.npz"), {"x": np.zeros(3)})
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "e.npz").st_mode & 0o777 == 0o666 & ~umask


def test_sigterm_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    """SIGTERM in the middle of the .npz write: exit status 143 as a killed process has, and
    neither the output nor the hidden temporary file (as large as the output) is left."""
    import signal

    real = np.savez

    def savez_then_terminated(f, **arrays):
        real(f, **arrays)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(np, "savez", savez_then_terminated)
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e:
        embed._save_npz(str(tmp_path / "e.npz"), {"x": np.zeros(3)})
    assert e.value.code == 143
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == previous


def test_a_killed_writers_hidden_file_is_removed_by_the_next_write(tmp_path):
    """kill -9 during the .npz write left its hidden temporary (as large as the output) beside
    the output for good; the next write removes those of dead writers of this host, and keeps a
    live writer's and another host's."""
    import socket

    dead = f".embed-{socket.gethostname()}-{2**22 + 7}-x1.npz"  # a pid no process has
    live = f".embed-{socket.gethostname()}-{os.getpid()}-x2.npz"
    other_host = f".embed-another-host-{2**22 + 7}-x3.npz"
    for name in (dead, live, other_host):
        (tmp_path / name).write_bytes(b"half")
    embed._save_npz(str(tmp_path / "e.npz"), {"x": np.zeros(3)})
    assert sorted(os.listdir(tmp_path)) == sorted([live, other_host, "e.npz"])


def test_a_workdir_trained_with_splash_attention_embeds_at_any_length(
    tmp_path, vocab_file, save_checkpoint
):
    """attention_impl='splash' saved by a TPU run (a ModernBERT-block model: windows, RoPE):
    embedding 16-token rows on this machine was a ValueError traceback from the kernel, which
    takes whole 128-token tiles only; the model loads with 'auto' and gives the same states as
    the einsum attention."""
    config = tiny.get_config()
    m = config.model
    m.position_embedding_type, m.norm_position, m.mlp_type = "rope", "pre", "geglu"
    m.local_attention, m.global_attn_every_n_layers = 4, 2
    m.attention_impl = "splash"
    model = M.BertForPreTraining(M.BertConfig.from_config_dict(config.model), rngs=nnx.Rngs(4))
    save_checkpoint(tmp_path, model, config, step=3)
    loaded, tokenizer = embed.load_encoder(str(tmp_path), vocab_file=vocab_file)
    out = embed.embed_texts(loaded, tokenizer, TEXTS[:2], max_seq_length=N)
    m.attention_impl = "einsum"
    ref = M.model_from_params(
        M.BertConfig.from_config_dict(config.model), nnx.to_pure_dict(nnx.state(model, nnx.Param))
    )
    seq, _ = ref.bert(out["input_ids"], out["attention_mask"], np.zeros_like(out["input_ids"]))
    real = out["attention_mask"].astype(bool)
    np.testing.assert_allclose(out["last_hidden_state"][real], np.asarray(seq)[real], atol=1e-5)


def test_a_byte_that_is_not_utf8_is_named_where_it_is_in_the_file(tmp_path):
    """The error's byte is the file's offset (a byte-order mark counted, which utf-8-sig's count
    skipped: 3 too few) and its line, for bad bytes anywhere in generated files."""
    rng = np.random.default_rng(0)
    path = tmp_path / "bad.txt"
    for case in range(40):
        good = "".join(rng.choice(list("ab é中😀\n"), size=rng.integers(0, 30))).encode()
        bad = rng.choice([b"\xff", b"\xed\xa0\x80", b"\xc3", b"\x80", b"\xe4\xb8"])
        data = (b"\xef\xbb\xbf" if case % 2 else b"") + good + bad + b"x\n"
        path.write_bytes(data)
        with pytest.raises(cli.UserError) as e:
            embed.read_lines(str(path))
        at = _decode_error_start(data)  # plain utf-8 reads a mark as U+FEFF: file offsets
        line = data.count(b"\n", 0, at) + 1
        assert f"(line {line}, byte {at}:" in str(e.value)


def _decode_error_start(data: bytes) -> int:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    raise AssertionError("the data is valid UTF-8")


def test_no_batch_is_larger_than_the_input(hf_dir, ours, monkeypatch):
    """--batch_size=4096 for a few lines padded each to 4,096 rows: that much compute and
    memory (an out-of-memory crash for a large batch on a big model) for nothing."""
    model, tokenizer = embed.load_encoder(hf_dir[0])
    rows = []
    forward = embed._forward
    monkeypatch.setattr(embed, "_forward", lambda b, i, m: rows.append(len(i)) or forward(b, i, m))
    out = embed.embed_texts(model, tokenizer, TEXTS, max_seq_length=N, batch_size=4096)
    assert rows == [len(TEXTS)]
    for key, value in ours.items():
        np.testing.assert_allclose(out[key], value, atol=1e-6, err_msg=key)
