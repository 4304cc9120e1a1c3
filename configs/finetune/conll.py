"""CoNLL-2003 NER: a tag per word (first word piece), entity-level F1 as conlleval counts it.

--config.data.train_file=conll2003/train.txt --config.data.eval_files=conll2003/valid.txt
"""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "conll"  # CoNLL token files, a tagging head
    config.data.tag_column = -1  # word POS chunk NER: the last column (1 for POS tagging)
    # CoNLL-2003's tag set; () would take the tags seen in the training file.
    config.data.labels = (
        "O",
        "B-PER",
        "I-PER",
        "B-ORG",
        "I-ORG",
        "B-LOC",
        "I-LOC",
        "B-MISC",
        "I-MISC",
    )
    config.data.metric = "f1"  # entity F1
    # Names are case-sensitive: start from a cased model (bert-base-cased); do_lower_case then
    # follows its tokenizer_config.json (None), or set it False for a cased vocab.txt without one.
    config.data.do_lower_case = None
    config.optim.learning_rate = 5e-5  # the BERT paper's grid top; NER likes the larger rate
    return config
