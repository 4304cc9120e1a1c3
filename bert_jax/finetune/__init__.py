"""Fine-tuning pre-trained BERT checkpoints on downstream tasks, optionally with LoRA.

    glue.py, conll.py, squad.py   the data formats people have: readers, prediction writers
    encode.py                     text -> fixed-length model inputs (squad.py windows its own)
    metrics.py                    the benchmarks' metrics
"""
