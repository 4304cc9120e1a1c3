"""STS-B (GLUE): sentence-pair similarity regression (0-5), Pearson and Spearman correlation."""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "glue"  # GLUE-style TSV, a [CLS] head
    config.data.layout = "stsb"  # sentence1, sentence2, score: a regression head, squared error
    config.data.metric = "pearson"  # GLUE reports Pearson/Spearman; Pearson judges
    return config
