"""The planner, `python -m bert_jax.plan`: the trainer's steps compiled for a Cloud TPU slice (or
one H100) on any machine, with what they need per chip and where their time goes. options.py
checks the flags; chips.py: chips and slices; steps.py compiles; figures.py, flops.py, hlo.py and
hbm.py: memory, FLOPs, collectives and HBM bytes; report.py prints. docs/scaling.md, "Planning a
TPU run without a TPU": its output and what each column means.
"""
