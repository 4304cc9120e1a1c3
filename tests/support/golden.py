"""The repository's paths and the golden records (data_prep/testdata, the original generator's
TFRecords, no manifest.json): their data facts and the small training configs that read them."""

import pathlib

from configs import tiny

REPO = str(pathlib.Path(__file__).resolve().parents[2])  # str: cwd= and os.path.join take it
TESTDATA = pathlib.Path(REPO, "data_prep", "testdata")
VOCAB_FILE = "bert-base-uncased-vocab.txt"  # in TESTDATA
GOLDEN_128 = "pydocs_small.L128.P20.dupe2.tfrecord"  # the pydocs records, L=128, P=20
SAMPLE_128 = "sample_text.L128.P20.dupe5.tfrecord"  # 60 records, L=128, P=20
CLS, SEP, MASK, VOCAB_SIZE = 101, 102, 103, 30522  # bert-base-uncased's

# Command-line flags for the golden records' shape (tests of the binaries).
GOLDEN_FLAGS = ["--config.data.max_seq_length=128", "--config.data.max_predictions_per_seq=20"]


def golden_data(config, testdata=TESTDATA):
    """The data facts of the original generator's golden TFRecords (no manifest.json): L=128,
    P=20, masked, with NSP, bert-base-uncased's vocabulary (its special ids for dynamic masking)."""
    config.data.max_seq_length, config.data.max_predictions_per_seq = 128, 20
    config.data.dynamic_masking = False
    config.data.vocab_file = str(testdata / VOCAB_FILE)
    config.data.cls_token_id, config.data.sep_token_id, config.data.mask_token_id = CLS, SEP, MASK
    return config


def small_config(testdata=TESTDATA, **train_overrides):
    """configs/tiny.py on the golden pydocs records (eval: sample_text), one device: 8 steps of
    8, a checkpoint every 3."""
    config = golden_data(tiny.get_config(), testdata)
    config.data.train_files = str(testdata / GOLDEN_128)
    config.data.eval_files = str(testdata / SAMPLE_128)
    config.data.read_threads = 1
    config.train.global_batch_size = 8
    config.train.num_train_steps = 8
    config.train.log_every_steps = 2
    config.train.update(train_overrides)
    config.optim.warmup_steps = 2
    config.optim.learning_rate = 1e-3
    config.eval.every_steps = 0
    config.eval.batch_size = 16
    config.checkpoint.every_steps = 3
    config.mesh.num_devices = 1
    return config


def data_config(files, dynamic=False, **kw):
    """configs/default.py's data section on the golden records' facts (no manifest.json): what
    data_facts.resolve would fill in."""
    from configs import default

    d = default.get_config().data
    d.train_files = str(files)
    d.dynamic_masking = dynamic
    d.max_seq_length, d.max_predictions_per_seq = 128, 20
    d.cls_token_id, d.sep_token_id, d.mask_token_id = CLS, SEP, MASK
    d.read_threads = 1
    d.update(kw)
    return d


def take(ds_or_it, n):
    """The first n elements of a dataset or iterator."""
    it = iter(ds_or_it)
    return [next(it) for _ in range(n)]
