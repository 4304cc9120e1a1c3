"""Fine-tuning pre-trained BERT checkpoints on downstream tasks, optionally with LoRA.

Data flows one way, file -> inputs -> model -> outputs -> metrics / predictions:

    glue.py, conll.py, squad.py   the formats people have: readers and prediction writers
                                  (squad.py also windows long contexts and picks answer spans)
    encode.py                     text -> fixed-length inputs for classification and tagging
    metrics.py                    the benchmarks' metrics (GLUE, conlleval, official SQuAD)
    tasks.py                      the three task families tying a format to a head and metrics
    heads.py                      TaskModel (BertModel + head) and the losses
    lora.py                       LoRA adapters: add, count, merge
    hf_export.py                  the fine-tuned model out as a transformers task model
                                  (--init is read by bert_jax/hf/pretrained.py, the one loader)
    runs.py                       config + --init -> task, tokenizer, model, mesh, optimizer
    packed.py                     several examples a row (bert_jax/data/input/packing.py): the
                                  step plan, packed batches, outputs unpacked
    predict.py                    inference, evaluation, prediction files
    config_check.py               the config's one validation pass, before anything loads
    train.py                      the fine-tuning run (its loop is bert_jax/training/loop.py's,
                                  its train state bert_jax/training/train_state.py's;
                                  config_check.check_finetuning first)
    __main__.py                   the absl binary: python -m bert_jax.finetune
    glue_table.py                 one command, one GLUE score table: every task of a GLUE
                                  directory fine-tuned in turn (python -m
                                  bert_jax.finetune.glue_table)
"""
