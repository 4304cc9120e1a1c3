"""SST-2 (GLUE): single-sentence sentiment, 2 classes, accuracy.

    python -m bert_jax.finetune --config=configs/finetune/sst2.py --init=BERT_DIR --workdir=DIR \
        --config.data.train_file=glue/SST-2/train.tsv --config.data.eval_files=glue/SST-2/dev.tsv
"""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "glue"  # GLUE-style TSV, a [CLS] head
    config.data.layout = "sst2"  # header: sentence, label (test.tsv: index, sentence)
    config.data.max_seq_length = 64  # SST-2 sentences are short; 64 pieces cover them
    return config
