"""CoLA (GLUE): grammatical acceptability, 2 classes, Matthews correlation.

train.tsv and dev.tsv have no header (source, label, mark, sentence); test.tsv has one.
"""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "glue"  # GLUE-style TSV, a [CLS] head
    config.data.layout = "cola"
    config.data.max_seq_length = 64  # CoLA sentences are short
    config.data.metric = "mcc"  # what GLUE reports for CoLA (also the layout's default)
    return config
