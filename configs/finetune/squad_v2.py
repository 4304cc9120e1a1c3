"""SQuAD v2.0: question answering where a third of the questions have no answer in the context.

A question gets "" when the [CLS] (no-answer) score beats the best span by more than
null_score_diff_threshold; predictions also write <name>_null_odds.json for tuning it.
"""

from configs.finetune import squad


def get_config():
    config = squad.get_config()
    config.data.version_2_with_negative = True  # unanswerable questions: [CLS] is the answer
    config.data.null_score_diff_threshold = 0.0  # tune on dev (run_squad.py: typically -1 to -5)
    return config
