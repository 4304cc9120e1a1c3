"""MNLI (GLUE): natural language inference on sentence pairs, 3 classes, accuracy on the
matched and mismatched dev sets (both scored, each under its file name).

    --config.data.eval_files=glue/MNLI/dev_matched.tsv,glue/MNLI/dev_mismatched.tsv
"""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "glue"  # GLUE-style TSV, a [CLS] head
    config.data.layout = "mnli"  # sentence1, sentence2, gold_label
    config.eval.every_steps = 5000  # 393k examples: about 36k steps at batch 32 for 3 epochs
    config.checkpoint.every_steps = 5000
    return config
