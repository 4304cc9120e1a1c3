"""BERT-Base (L=12, H=768, A=12; about 110M parameters), phase 1 of the paper recipe."""
from configs import default


def get_config():
    return default.get_config()
