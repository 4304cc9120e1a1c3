"""The bad-input sweep's planner cases (issue 34): `python -m bert_jax.plan` held to the binaries'
standard. Each mistake is one `error:` line naming the flag, exit status 2, nothing on stdout, and
is told before libtpu starts or anything compiles (so these run in the sweep's fork server in a
fraction of a second each). The planner's successful runs, the libtpu fallback and v5e-1:
tests/e2e/test_plan.py.
"""

PLAN = (
    "bert_jax.plan --config=configs/tiny.py --topology=v5e-4 --meshes=4x1x1 "
    "--global_batch_sizes=8 --steps=train"
)

CASES = [
    ("plan: stray argument", PLAN + " extra", "extra"),
    ("plan: flag typo", PLAN + " --topolgy=v5e-4", "Unknown command line flag 'topolgy'"),
    ("plan: cpu:0", PLAN + " --topology=cpu:0", "--topology=cpu:0"),
    ("plan: cpu:x", PLAN + " --topology=cpu:x", "--topology=cpu:x"),
    ("plan: topology unknown", PLAN + " --topology=v2-8", ("--topology=v2-8", "unknown")),
    (
        "plan: topology not a slice",
        PLAN + " --topology=v5p-63",
        ("--topology=v5p-63", "v5p-8"),  # the documented ones, listed
    ),
    ("plan: slice shape 0", PLAN + " --topology=v5e:0x4", "--topology=v5e:0x4"),
    ("plan: slice shape 3D for v5e", PLAN + " --topology=v5e:2x2x2", "--topology=v5e:2x2x2"),
    ("plan: num_slices 0", PLAN + " --num_slices=0", "--num_slices=0"),
    ("plan: num_slices on cpu", PLAN + " --topology=cpu:4 --num_slices=2", "--num_slices=2"),
    ("plan: mesh product", PLAN + " --meshes=2x1x1", ("--meshes", "2x1x1", "4")),
    ("plan: mesh not a shape", PLAN + " --meshes=4x1", ("--meshes", "32x8x1")),
    ("plan: mesh axis 0", PLAN + " --meshes=4x0x1", "--meshes"),
    (
        "plan: tensor vs heads",
        PLAN + " --meshes=1x1x4",  # tiny has 2 heads
        ("--meshes", "num_attention_heads=2"),
    ),
    (
        "plan: data across slices",
        PLAN + " --topology=v5e-4 --num_slices=2 --meshes=1x8x1",
        ("--meshes", "multiple of the 2 slices"),
    ),
    (
        "plan: batch not divisible",
        PLAN + " --global_batch_sizes=6",
        ("--global_batch_sizes", "4 data-parallel devices"),
    ),
    (
        "plan: batch vs accumulation",
        PLAN + " --global_batch_sizes=12 --config.train.grad_accum_steps=2",
        ("--global_batch_sizes", "2 accumulation steps", "multiple of 8"),
    ),
    ("plan: batch negative", PLAN + " --global_batch_sizes=-8", ("--global_batch_sizes", "-8")),
    ("plan: batch a word", PLAN + " --global_batch_sizes=big", "--global_batch_sizes"),
    (
        "plan: json_out under a file",
        PLAN + " --json_out={d}/not_a_dir/p.json",
        ("--json_out", "not_a_dir"),
    ),
    ("plan: json_out a directory", PLAN + " --json_out={d}/dir", ("--json_out", "directory")),
    ("plan: hlo_dir under a file", PLAN + " --hlo_dir={d}/not_a_dir/hlo", "--hlo_dir"),
    ("plan: steps unknown", PLAN + " --steps=train,predict", "--steps"),
    ("plan: remat a word", PLAN + " --remat=maybe", "--remat"),
    ("plan: dtype unknown", PLAN + " --dtype=float16", "--dtype=float16"),
    ("plan: attention_dropout 1", PLAN + " --attention_dropout=1", "--attention_dropout"),
    ("plan: attention_dropout NaN", PLAN + " --attention_dropout=nan", "--attention_dropout"),
    ("plan: seq_len past positions", PLAN + " --seq_len=4096", ("--seq_len", "positions")),
    ("plan: seq_len 2", PLAN + " --seq_len=2", "--seq_len=2"),
    ("plan: num_layers negative", PLAN + " --num_layers=-1", "--num_layers"),
    ("plan: vocab_size 0", PLAN + " --vocab_size=0", "--vocab_size"),
    ("plan: top negative", PLAN + " --top=-3", "--top"),
    ("plan: config missing", PLAN + " --config=configs/nope.py", "configs/nope.py"),
    (
        "plan: config a fine-tuning one",
        PLAN + " --config=configs/finetune/sst2.py",
        ("--config", "not a pre-training config"),
    ),
    (
        "plan: config field typo",
        PLAN + " --config.model.hiden_size=64",
        "did you mean --config.model.hidden_size?",
    ),
    (
        "plan: hidden vs heads",
        PLAN + " --config.model.num_attention_heads=3",
        "num_attention_heads (3)",
    ),
    (
        "plan: attention_impl cudnn on a TPU",
        PLAN + " --attention_impl=cudnn",
        ("--attention_impl=cudnn", "GPU only", "--topology=h100"),
    ),
    (
        "plan: config attention_impl cudnn on fake CPU devices",
        PLAN + " --topology=cpu:4 --config.model.attention_impl=cudnn",
        ("--config.model.attention_impl=cudnn", "GPU only", "fake CPU devices"),
    ),
    (
        "plan: finetune_config a pre-training config",
        PLAN + " --steps=finetune --finetune_config=configs/tiny.py",
        ("--finetune_config=configs/tiny.py", "not a fine-tuning config"),
    ),
    (
        "plan: finetune_config not a .py file",
        PLAN + " --steps=finetune --finetune_config=README.md",
        ("--finetune_config=README.md", "not a Python config file"),
    ),
    (
        "plan: finetune_config missing",
        PLAN + " --steps=finetune --finetune_config={d}/nope.py",
        ("--finetune_config", "nope.py"),
    ),
]
