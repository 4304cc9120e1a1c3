"""MRPC (GLUE): paraphrase detection on sentence pairs, 2 classes, F1 and accuracy."""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "glue"  # GLUE-style TSV, a [CLS] head
    config.data.layout = "mrpc"  # header: Quality, #1 ID, #2 ID, #1 String, #2 String
    config.data.metric = "f1"  # GLUE reports F1/accuracy; F1 of the "paraphrase" class judges
    return config
