"""Training: the steps, the loop both trainers run, and what keeps a run safe to stop.

pretrain.py      pre-training's jitted steps and train_and_evaluate
train_state.py   the train state both trainers share: Setup and its one builder, its layout
                 on the mesh, step 0, one optimizer step that keeps NaNs out of the parameters
loop.py          the loop skeleton both trainers run: when to log, eval, save and stop
optim.py         BERT's AdamW and LAMB with their schedules and batch-size warmup
losses.py        the pre-training losses (and held-out accuracy by kind of masked position)
checkpoints.py   Orbax checkpoints that resume exactly and refuse damaged files
                 (checksums.py: their files' checksums); where a new run starts from
                 (train.init_checkpoint, --init: phase 1's workdir, another run's, a Hugging
                 Face one) and which kind of directory it is
pretrained.py    a trained model read back (a workdir or a Hugging Face directory): the one
                 loader behind export, embed and finetune/; its vocabulary loaded and checked once
faults.py        SIGTERM and non-finite steps
metrics_log.py   TensorBoard, metrics.jsonl and the progress line
collapse.py      the eval-time warning for a run whose outputs are all the same
config_check.py  pre-training's one validation pass: a config's mistakes, all named before
                 anything compiles
"""
