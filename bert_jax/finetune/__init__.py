"""Fine-tuning pre-trained BERT checkpoints on downstream tasks, optionally with LoRA.

Data flows one way, file -> inputs -> model -> outputs -> metrics / predictions:

    glue.py, squad.py             the formats' readers and prediction writers (squad.py also
                                  windows long contexts and picks answer spans)
    encode.py                     text -> fixed-length inputs for classification and tagging
    metrics.py                    the benchmarks' metrics (GLUE, conlleval, official SQuAD)
    tasks.py                      the three task families tying a format to a head and metrics,
                                  and the CoNLL reader and writer
    heads.py                      TaskModel (BertModel + head), the losses, and the fine-tuned
                                  model out as a transformers task model
    lora.py                       LoRA adapters: add, count, merge
    runs.py                       config + --init (training/pretrained.py reads it) -> task,
                                  tokenizer, model, mesh, optimizer; the config's one
                                  validation pass, before anything loads
    packed.py                     several examples a row: step plan, batches, outputs unpacked
    predict.py                    inference, evaluation, prediction files
    train.py                      the run, on bert_jax/training's loop and train state
    __main__.py                   the absl binary: python -m bert_jax.finetune
    glue_table.py                 every task of a GLUE directory in turn, one score table

docs/finetuning.md says how to run each task.
"""
