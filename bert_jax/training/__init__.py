"""Training: the steps, the loop both trainers run, and what keeps a run safe to stop.

pretrain.py      pre-training's jitted steps and train_and_evaluate
train_state.py   the train state both trainers share, and one NaN-safe optimizer step
loop.py          the loop both trainers run: when to log, eval, save and stop
optim.py         schedules, batch-size warmup, AdamW, LAMB, StableAdamW
losses.py        the pre-training losses and accuracies
checkpoints.py   Orbax checkpoints (checksums.py: their arrays' fingerprints); a new run's start
pretrained.py    a trained model read back: the loader behind export, embed and finetune/
faults.py        signals, one run per workdir, non-finite steps
metrics_log.py   TensorBoard, metrics.jsonl and the progress line
collapse.py      the eval-time warning for a run whose outputs are all the same
config_check.py  a config's mistakes, all named before anything compiles
"""
