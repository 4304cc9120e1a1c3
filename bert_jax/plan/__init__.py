"""The planner: the trainer's steps compiled for a Cloud TPU slice (or one H100) on any machine,
with what they need per chip and where their time goes. `python -m bert_jax.plan` (__main__.py).

    options.py   the flags' plans, checked before anything compiles (one `error:` line each)
    chips.py     documented TPU chips and slice shapes; the slice's devices from libtpu
    steps.py     the trainer's own steps lowered for abstract inputs and compiled
    figures.py   memory, FLOPs, collectives and the step-time estimates of a compiled step
    hlo.py       a compiled program's HLO text read: computations, instructions, array bytes
    hbm.py       where the step's HBM bytes go, by instruction and by part of the model
    flops.py     model FLOPs (MFU's numerator; bench/ uses it too)
    report.py    the printed table, the byte attribution and the verdict

docs/scaling.md ("Planning a TPU run without a TPU") shows its output and what each column means.
"""
