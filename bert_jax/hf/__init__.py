"""Hugging Face in and out: the weights' names and files, below training (which starts from them
and whose pretrained.py reads either kind of directory back), and an export's directory.

architectures.py  the two transformers classes as data (BertForPreTraining,
                  ModernBertForMaskedLM): config.json both ways and the weights' names
modernbert.py     a ModernBERT config.json <-> the modern block's BertConfig
bert.py           a Hugging Face directory written (save_hf) and read (load_hf)
files.py          a Hugging Face directory's files (safetensors, torch .bin, TF checkpoints)
publish.py        an export's directory written whole
"""
