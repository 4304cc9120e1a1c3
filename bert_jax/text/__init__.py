"""Text to token ids. JAX-free (data_prep imports it).

tokenization.py    WordPiece (the original's rules, exactly) and SentencePiece
tokenizer_json.py  any Hugging Face tokenizer.json (BPE, Unigram, WordPiece)
"""
