"""Hugging Face in and out. architectures, modernbert, bert and files map and read the weights
(below training, which starts from them); pretrained and publish read and write trained runs
(above it).

pretrained.py     a trained model read back (a workdir or a Hugging Face directory): the one
                  loader behind export, embed and finetune/; its vocabulary loaded and checked once
architectures.py  the two transformers classes as data (BertForPreTraining,
                  ModernBertForMaskedLM): config.json both ways and the weights' names
modernbert.py     a ModernBERT config.json <-> the modern block's BertConfig
bert.py           a Hugging Face directory written (save_hf) and read (load_hf)
files.py          a Hugging Face directory's files (safetensors, torch .bin, TF checkpoints)
publish.py        an export's directory written whole
"""
