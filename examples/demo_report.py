"""What `make demo` shows after training: the held-out curve, fill-mask answers from the exported
model through transformers, and demo_out/curves.png.

Fill-mask runs on two kinds of input. Hand-written sentences in pairs: the same frame with two
contexts whose right answers differ, so a model that answers both right reads the context (a
unigram model gives one answer to both). And held-out records masked as the trainer's eval masks
them, each masked position marked with its kind: at a kept position the input shows the answer,
at a random one it shows a wrong word, so only the [MASK] positions test what was learnt.
"""

import os

# (frame with one [MASK], the right answer); consecutive sentences are a pair sharing a frame whose
# context decides a word this corpus uses often (tests/e2e/test_demo.py: each answer is one piece of
# the demo's vocabulary). Chosen from 30 candidate pairs scored with a 1500-step demo model
# (docs/training.md, "What the fill-mask shows"): the kinds of context a 2-layer model reads first
# are grammatical (a verb agreeing with its subject's number, "a" or "an" before the next word)
# and the word a phrase pairs with; pairs that need a fact ("a [MASK] is raised if the key is
# missing": keyerror) or an opposite (true/false, read/write, minimum/maximum) it answered with
# the same word both times, so they are not shown.
SENTENCES = [
    ("this object [MASK] immutable.", "is"),
    ("these objects [MASK] immutable.", "are"),
    ("the argument [MASK] passed to the function.", "is"),
    ("the arguments [MASK] passed to the function.", "are"),
    ("the function returns [MASK] list.", "a"),
    ("the function returns [MASK] object.", "an"),
    ("positional and [MASK] arguments", "keyword"),
    ("keyword and [MASK] arguments", "positional"),
]


def print_curve(evals: list[dict], base: float) -> None:
    """Held-out accuracy at [MASK] positions by step, beside the kept/random figures."""
    print(f"\nheld-out MLM accuracy by step (most-frequent-token baseline {base:.3f}):")
    print("   step  [MASK]   kept  random")
    for r in evals:
        acc = r["mlm_accuracy"]
        print(
            f"  {r['step']:>5}  {acc:.3f}  {r.get('mlm_accuracy_kept', 0):.3f}  "
            f"{r.get('mlm_accuracy_random', 0):.3f}  {'#' * round(100 * acc)}"
        )


def load_hf(hf_dir: str):
    """(transformers.BertForMaskedLM, BertTokenizer) from the exported directory."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: never touch the network
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.BertForMaskedLM.from_pretrained(hf_dir, local_files_only=True).eval()
    tokenizer = transformers.BertTokenizer.from_pretrained(hf_dir, local_files_only=True)
    return model, tokenizer


def _logits(model, ids, segments=None):
    import torch

    with torch.no_grad():
        return model(
            input_ids=torch.tensor([ids]).long(),
            token_type_ids=None if segments is None else torch.tensor([segments]).long(),
        ).logits[0]


def fill_sentences(model, tokenizer, sentences=SENTENCES, k: int = 5) -> int:
    """Prints the top-k answers for each hand-written sentence; returns how many have the right
    answer first."""
    print(f"hand-written sentences (pairs: the same frame, two contexts); top {k} answers:")
    right = 0
    for text, answer in sentences:
        ids = tokenizer(text)["input_ids"]
        where = ids.index(tokenizer.mask_token_id)
        probs = _logits(model, ids)[where].softmax(-1)
        top = probs.topk(k)
        words = tokenizer.convert_ids_to_tokens(top.indices.tolist())
        right += words[0] == answer
        mark = "right" if words[0] == answer else ("in top 5" if answer in words else "wrong")
        print(f"  {text}")
        shown = "  ".join(f"{w} {p:.2f}" for w, p in zip(words, top.values.tolist()))
        print(f"      -> {shown}   (answer {answer!r}: {mark})")
    print(f"{right} of {len(sentences)} hand-written [MASK]s answered right first", flush=True)
    return right


def fill_held_out(model, tokenizer, config, num_records: int = 2) -> None:
    """Fills every masked position of the first held-out records, masked as the trainer's eval
    masks them, marking each position's kind."""
    from bert_jax.data.contract import features
    from bert_jax.data.input import pipeline

    d = config.data
    batch = pipeline.eval_batches(
        d, d.eval_files, config.model.vocab_size, num_records, num_records, config.train.seed
    )[0]
    print(
        "\nheld-out records (the trainer's eval masking): [guess] or [guess (answer)] at a [MASK];"
        " {shown->guess (answer)} at a random replacement; word* at a kept position (the input"
        " shows the answer there)"
    )
    right = total = 0
    for row in range(num_records):
        length = int(batch[features.INPUT_MASK][row].sum())
        ids = batch[features.INPUT_IDS][row, :length]
        guesses = _logits(model, ids.tolist(), batch[features.SEGMENT_IDS][row, :length].tolist())
        guesses = guesses.argmax(-1).numpy()
        tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
        weights = batch[features.MASKED_LM_WEIGHTS][row]
        for p, want in zip(
            batch[features.MASKED_LM_POSITIONS][row][weights > 0],
            batch[features.MASKED_LM_IDS][row][weights > 0],
        ):
            guess, answer = tokenizer.convert_ids_to_tokens([int(guesses[p]), int(want)])
            miss = "" if guess == answer else f" ({answer})"
            if ids[p] == d.mask_token_id:
                right, total = right + (guess == answer), total + 1
                tokens[p] = f"[{guess}{miss}]"
            elif ids[p] == want:
                tokens[p] = f"{answer}*"
            else:
                tokens[p] = f"{{{tokens[p]}->{guess}{miss}}}"
        print("  " + tokenizer.convert_tokens_to_string(tokens[1:]).replace(" [SEP]", "\n  "))
    print(f"{right} of {total} [MASK]s in these records filled right", flush=True)


def plot(
    records: list[dict],
    base: float,
    bar: float | None,
    path: str,
    title: str = "bert-jax demo: a small BERT pre-trained on the Python docs, held-out accuracy",
    unigram_loss: float | None = None,
    vocab_size: int | None = None,
) -> None:
    """Losses (left) and held-out accuracies by kind of masked position (right) against the
    most-frequent-token baseline, the pass bar (None: none), and where given the plateau's loss
    (the unigram cross-entropy at held-out [MASK] positions) and chance (uniform over
    vocab_size: loss log V, accuracy 1/V)."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_recs = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    steps = [r["step"] for r in evals]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax_loss.plot(
        [r["step"] for r in train_recs], [r["loss"] for r in train_recs], label="train loss"
    )
    ax_loss.plot(steps, [r["mlm_loss"] for r in evals], "o-", label="held-out loss at [MASK]")
    if unigram_loss is not None:
        ax_loss.axhline(
            unigram_loss,
            color="gray",
            linestyle=":",
            label=f"plateau: unigram cross-entropy at [MASK] ({unigram_loss:.2f})",
        )
    if vocab_size:
        ax_loss.axhline(
            math.log(vocab_size),
            color="black",
            linestyle="-.",
            linewidth=0.8,
            label=f"chance: uniform over {vocab_size:,} ({math.log(vocab_size):.2f})",
        )
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy")
    ax_loss.legend()
    for key, style, label in (
        ("mlm_accuracy", "o-", "at [MASK] positions (the headline)"),
        ("mlm_accuracy_kept", "^:", "at kept positions (input shows the answer)"),
        ("mlm_accuracy_random", "v:", "at random replacements"),
        ("nsp_accuracy", "s--", "NSP"),
    ):
        if key in evals[-1]:
            ax_acc.plot(steps, [r.get(key, float("nan")) for r in evals], style, label=label)
    ax_acc.axhline(
        base, color="gray", linestyle=":", label=f"most-frequent-token baseline ({base:.3f})"
    )
    if bar is not None:
        ax_acc.axhline(
            bar, color="red", linestyle="--", linewidth=0.8, label=f"pass bar ({bar:.3f})"
        )
    if vocab_size:
        ax_acc.axhline(
            1 / vocab_size,
            color="black",
            linestyle="-.",
            linewidth=0.8,
            label=f"chance (1/{vocab_size:,})",
        )
    if "nsp_majority" in evals[-1]:
        ax_acc.axhline(evals[-1]["nsp_majority"], color="black", linestyle="-.", label="NSP chance")
    ax_acc.set_xlabel("step")
    ax_acc.set_ylabel("held-out accuracy")
    ax_acc.set_ylim(0, 1)
    ax_acc.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
