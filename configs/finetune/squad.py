"""SQuAD v1.1: extractive question answering, exact match and F1 (official normalization).

    --config.data.train_file=squad/train-v1.1.json --config.data.eval_files=squad/dev-v1.1.json
Settings as google-research/bert's run_squad.py README: lr 3e-5, 2 epochs, L=384, stride 128.
"""

from configs.finetune import base


def get_config():
    config = base.get_config()
    config.data.format = "squad"  # SQuAD JSON, a span head
    config.data.max_seq_length = 384  # question + context window + 3 special tokens
    config.data.doc_stride = 128  # pieces between window starts over long contexts
    config.data.max_query_length = 64  # question pieces kept
    config.data.max_answer_length = 30  # longest answer predicted, in pieces
    config.data.version_2_with_negative = False  # every question has an answer
    config.optim.learning_rate = 3e-5  # run_squad.py's
    config.train.num_epochs = 2.0  # run_squad.py's
    config.eval.batch_size = 64  # windows per eval step
    return config
