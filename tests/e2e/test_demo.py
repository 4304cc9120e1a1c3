"""`make demo`'s pass/fail rule and its hand-written fill-mask sentences (the demo itself is run
by `make demo`, not by the suite: minutes of training)."""

import pytest

from examples import demo, demo_report


@pytest.mark.parametrize(
    "evals, base, passes",
    [
        ([{"mlm_accuracy": 0.06}, {"mlm_accuracy": 0.30}], 0.06, True),  # 5x
        ([{"mlm_accuracy": 0.18}], 0.06, True),  # exactly 3x
        ([{"mlm_accuracy": 0.17}], 0.06, False),
        # A model that copies kept tokens and answers "." elsewhere: its all-positions figure
        # doubles, its [MASK] figure stays at the baseline. It fails.
        (
            [{"mlm_accuracy": 0.06, "mlm_accuracy_all": 0.13, "mlm_accuracy_kept": 0.69}],
            0.06,
            False,
        ),
        # The last eval counts, not the best one.
        ([{"mlm_accuracy": 0.30}, {"mlm_accuracy": 0.10}], 0.06, False),
        ([{"mlm_accuracy_all": 0.9}], 0.06, False),  # no [MASK]-position figure: fails
        ([], 0.06, False),
    ],
)
def test_the_demo_passes_only_at_three_times_the_baseline_at_mask_positions(evals, base, passes):
    assert demo.BAR_FACTOR == 3.0
    failure = demo.verdict(evals, base)
    assert (failure is None) == passes, failure
    if not passes:
        assert "[MASK]" in failure


def test_each_sentence_has_one_mask_and_a_one_piece_answer_in_the_demo_vocabulary(tmp_path):
    """An answer the demo's vocabulary splits into pieces could never be the top answer."""
    import subprocess
    import sys

    vocab = tmp_path / "vocab.txt"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "data_prep.vocab",
            f"--input={demo.CORPUS}",
            f"--output={vocab}",
            f"--vocab_size={demo.VOCAB_SIZE}",
        ],
        check=True,
        capture_output=True,
        cwd=demo.REPO,
    )
    words = set(vocab.read_text(encoding="utf-8").split("\n"))
    answers = [answer for _, answer in demo_report.SENTENCES]
    assert all(text.count("[MASK]") == 1 for text, _ in demo_report.SENTENCES)
    assert all(a in words for a in answers), [a for a in answers if a not in words]
    # Pairs share a frame and differ in their answer: a context-blind model cannot get both.
    assert len(answers) % 2 == 0
    for i in range(0, len(answers), 2):
        assert answers[i] != answers[i + 1]


def test_the_demo_config_fits_the_records_the_demo_writes():
    from configs import demo as demo_config

    config = demo_config.get_config()
    # Position embeddings for exactly the records' length: longer would be rows never trained.
    assert config.model.max_position_embeddings == demo.SEQ_LENGTH
    assert config.optim.warmup_steps < config.train.num_train_steps


def test_the_cpu_recipe_reads_a_bundled_multistream_dump_its_config_fits():
    """examples/cpu_recipe.py's corpus ships with the repo (its index beside it, which the dump
    reader uses to split work) and configs/cpu.py fits the records it writes."""
    import os

    from configs import cpu as cpu_config
    from examples import cpu_recipe

    assert os.path.exists(cpu_recipe.CORPUS)
    assert os.path.exists(cpu_recipe.CORPUS.replace(".xml.bz2", "-index.txt.bz2"))
    config = cpu_config.get_config()
    assert config.model.max_position_embeddings == demo.SEQ_LENGTH
    assert config.optim.warmup_steps < config.train.num_train_steps
    assert config.eval.num_examples == 0  # every held-out record: the figures are the split's
