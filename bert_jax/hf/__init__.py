"""Hugging Face in and out: bert.py writes (save_hf) and reads (load_hf) a model directory;
architectures.py and modernbert.py hold the two transformers classes' config.json and weight
names, files.py reads a directory's files, publish.py writes an export's directory whole.
"""
