"""Contextual embeddings: one text a line in, BERT's hidden states out (docs/model.md).

    python -m bert_jax.embed --model=DIR --input=texts.txt --output=out.npz --max_seq_length=128

DIR: a Hugging Face BERT or ModernBERT directory, or a training --workdir. Row i of the .npz is
line i: input_ids, attention_mask [T, N]; last_hidden_state [T, N, hidden]; pooled [T, hidden].
"""

# First: a Ctrl-C while JAX imports is cli's one line (cli._interrupted_hook), not a traceback.
from bert_jax import cli

# isort: split
import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from absl import flags, logging
from flax import nnx

from bert_jax import runtime, storage
from bert_jax.data.contract import features as F
from bert_jax.storage import workdir_lock
from bert_jax.training import pretrained

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defined when run as a program only, so importing this module defines no flags."""
    flags.DEFINE_string("model", None, "A Hugging Face BERT directory or a training --workdir.")
    flags.DEFINE_string("input", None, "Text file, one text per line (UTF-8).")
    flags.DEFINE_string("output", None, "The .npz file to write.")
    flags.DEFINE_integer(
        "max_seq_length", 128, "Tokens per text including [CLS] and [SEP]; longer texts are cut."
    )
    flags.DEFINE_integer("batch_size", 32, "Texts per forward pass.")
    flags.DEFINE_integer(
        "step", None, "For a --workdir: the checkpoint step (default: the latest)."
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "Vocabulary (vocab.txt or SentencePiece .model); default: DIR/vocab.txt "
        "(or DIR/tokenizer.json), or the vocabulary the run's data recorded.",
    )
    flags.DEFINE_bool("do_lower_case", None, "Default: tokenizer_config.json's value, else True.")
    flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Computation dtype.")


def load_encoder(
    path: str,
    *,
    step: int | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    dtype: str = "float32",
):
    """(BertForPreTraining, tokenizer) from a Hugging Face directory or a training workdir."""
    loaded = pretrained.load(
        path,
        step=step,
        overrides={"dtype": dtype},
        vocab_file=vocab_file,
        do_lower_case=do_lower_case,
    )
    if loaded.tokenizer is None:
        raise cli.UserError(
            f"{path} names no vocabulary: pass --vocab_file=PATH/vocab.txt (the vocabulary the "
            "model's training data was tokenized with)"
        )
    logging.info("loaded %s", loaded.source)
    if any(".pooler." in name for name in loaded.fresh):
        # transformers warns too; `pooled` would be a random projection of the [CLS] state.
        cli.warn(
            f"{path} has no pooler weights (a token-tagging or QA model saves none): 'pooled' "
            "comes from a freshly initialized pooler, not a trained one; use last_hidden_state"
        )
    return loaded.model(), loaded.tokenizer


def tokenize(
    tokenizer, texts: Sequence[str], max_seq_length: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(input_ids [T, N], attention_mask [T, N], how many texts were cut) for [CLS] text [SEP]."""
    F.check_seq_length(max_seq_length, 1)
    flat, per_text = tokenizer.encode_batch(list(texts))
    ids = np.full((len(texts), max_seq_length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(texts), max_seq_length), np.int32)
    starts = np.concatenate([[0], np.cumsum(per_text)])
    room = max_seq_length - 2
    for i in range(len(texts)):
        pieces = flat[starts[i] : starts[i] + min(per_text[i], room)]
        n = len(pieces) + 2
        ids[i, :n] = np.concatenate([[tokenizer.cls_id], pieces, [tokenizer.sep_id]])
        mask[i, :n] = 1
    return ids, mask, int(np.sum(per_text > room))


@nnx.jit
def _forward(bert, ids, mask):
    return bert(ids, mask, jnp.zeros_like(ids))


def embed_texts(
    model, tokenizer, texts: Sequence[str], max_seq_length: int = 128, batch_size: int = 32
) -> dict[str, np.ndarray]:
    """Texts -> {'input_ids', 'attention_mask', 'last_hidden_state', 'pooled'} of `model`, a
    BertForPreTraining or a BertModel. Every batch has `batch_size` rows: one compile."""
    bert = getattr(model, "bert", model)
    if max_seq_length > bert.config.max_position_embeddings:
        raise cli.UserError(
            f"max_seq_length {max_seq_length} exceeds the model's "
            f"max_position_embeddings {bert.config.max_position_embeddings}"
        )
    if batch_size < 1:
        raise cli.UserError(f"batch_size must be positive, got {batch_size}")
    ids, mask, cut = tokenize(tokenizer, texts, max_seq_length)
    if cut:
        cli.warn(
            f"{cut} of {len(texts)} texts were longer than {max_seq_length} tokens and were cut"
        )
    # No batch larger than the input: --batch_size=4096 for ten lines padded them to 4,096 rows.
    batch_size = max(1, min(batch_size, len(texts)))
    hidden = bert.config.hidden_size
    last = np.zeros((len(texts), max_seq_length, hidden), np.float32)
    pooled = np.zeros((len(texts), hidden), np.float32)
    for start in range(0, len(texts), batch_size):
        end = min(start + batch_size, len(texts))
        pad = ((0, batch_size - (end - start)), (0, 0))
        seq, pool = _forward(bert, np.pad(ids[start:end], pad), np.pad(mask[start:end], pad))
        last[start:end] = np.asarray(seq[: end - start], np.float32)
        pooled[start:end] = np.asarray(pool[: end - start], np.float32)
    return {"input_ids": ids, "attention_mask": mask, "last_hidden_state": last, "pooled": pooled}


def read_lines(path: str) -> list[str]:
    why = storage.not_a_file(path)
    if why:
        raise cli.UserError(f"--input={path!r} {why}; pass a text file with one text per line")
    data = storage.read_bytes(path)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark is no text
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise cli.UserError(
            f"--input={path!r} is not UTF-8 text (line {line}, byte {e.start}: {e.reason}); "
            "convert it (e.g. iconv -t UTF-8)"
        ) from None
    # Lines end at "\n" (or "\r\n") only, as `wc -l` counts them (not str.splitlines()'s).
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines[-1] == "":
        lines.pop()  # the last line's end
    if not lines:
        raise cli.UserError(f"--input={path!r} is empty; pass a file with one text per line")
    return lines


def _output_path(path: str) -> str:
    """The .npz file --output names (np.savez's rule: .npz added), checked before any work."""
    if storage.isdir(path):
        raise cli.UserError(f"--output={path!r} is a directory; pass a .npz file name")
    if not path.endswith(".npz"):
        path += ".npz"  # what np.savez would do with the name
    if storage.is_url(path):
        return path  # a bucket has no directories to check
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise cli.UserError(f"--output={path!r}: the directory {directory} does not exist")
    return path


def _save_npz(path: str, arrays: dict) -> None:
    """Writes the .npz beside its final name and renames: never a half-written file there."""
    path = _output_path(path)
    if storage.is_url(path):  # an upload appears whole when it finishes
        with storage.open_write(path) as f:
            np.savez(f, **arrays)
        return
    directory = os.path.dirname(os.path.abspath(path))
    prefix = f".embed-{socket.gethostname()}-"
    # The temporaries of killed embeds of this host (their writer's pid is in their name) go.
    for name in os.listdir(directory):
        pid = name[len(prefix) :].split("-", 1)[0]
        if not (name.startswith(prefix) and name.endswith(".npz") and pid.isdigit()):
            continue
        if not workdir_lock.pid_running(int(pid)):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
    with cli.user_path("--output", path):  # a read-only directory, say
        fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=".npz", dir=directory)
    # Not mkstemp's 0600: 0666 less the umask, as any file the user writes.
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    # A SIGTERM while writing exits (143) through `finally`, which removes the temporary.
    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGTERM, lambda n, _: sys.exit(128 + n)) if main else None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv):
    del argv  # cli.run refuses arguments after the flags
    for name in ("model", "input", "output"):
        if not FLAGS[name].value:
            raise cli.UserError(f"--{name} is required")
    paths = {f"--{name}": FLAGS[name].value for name in ("model", "input", "output", "vocab_file")}
    storage.check_paths(paths, outputs=["--output"])  # parsed once, before any read or write
    # Mistakes a user can see without the model: before loading and embedding, not after.
    F.check_seq_length(FLAGS.max_seq_length, 1, "--max_seq_length")
    if FLAGS.batch_size < 1:
        raise cli.UserError(f"--batch_size={FLAGS.batch_size} must be 1 or more")
    output = _output_path(FLAGS.output)
    if output != FLAGS.output:  # the file written is NAME.npz: it must not be an input either
        storage.check_paths(paths | {"--output": output}, outputs=["--output"])
    texts = read_lines(FLAGS.input)
    runtime.start()
    model, tokenizer = load_encoder(
        FLAGS.model,
        step=FLAGS.step,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case,
        dtype=FLAGS.dtype,
    )
    out = embed_texts(model, tokenizer, texts, FLAGS.max_seq_length, FLAGS.batch_size)
    _save_npz(output, out)
    print(
        f"wrote {output}: {len(texts)} texts, last_hidden_state "
        f"{out['last_hidden_state'].shape}, pooled {out['pooled'].shape}"
    )


if __name__ == "__main__":
    define_flags()
    cli.run(main)
