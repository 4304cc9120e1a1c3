"""Hugging Face in and out. bert, modernbert and files map and read the weights (below
training, which starts from them); pretrained and publish read and write trained runs (above it).

pretrained.py  a trained model read back (a workdir or a Hugging Face directory): the one
               loader behind export, embed and finetune/; its vocabulary loaded and checked once
bert.py        the weights' names both ways (BertForPreTraining)
modernbert.py  ModernBERT's names (ModernBertForMaskedLM)
files.py       a Hugging Face directory's files (safetensors, torch .bin, TF checkpoints)
publish.py     an export's directory written whole
"""
