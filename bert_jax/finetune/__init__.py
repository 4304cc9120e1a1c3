"""Fine-tuning pre-trained BERT on downstream tasks, optionally with LoRA (docs/finetuning.md).

glue.py, squad.py   the formats' readers and writers (squad.py: also windows and answer spans)
encode.py           text -> fixed-length inputs for classification and tagging
metrics.py          the benchmarks' metrics (GLUE, conlleval, official SQuAD)
tasks.py            the task families (a format, a head, metrics); the CoNLL reader and writer
heads.py            TaskModel (BertModel + head), the losses, the export to transformers
lora.py             LoRA adapters: add, count, merge
runs.py             config (checked once, first) + --init -> task, tokenizer, model, optimizer
packed.py           several examples a row: step plan, batches, outputs unpacked
predict.py          inference, evaluation, prediction files
train.py            the run, on bert_jax/training's loop and train state
__main__.py         the binary: python -m bert_jax.finetune
glue_table.py       every task of a GLUE directory in turn, one score table
"""
