"""The model: BERT or the ModernBERT block in Flax NNX. encoder.py assembles layers.py's blocks
(run by layer_stack.py, over attention.py, rope.py, dropout.py and mixed_matmul.py) as
bert_config.py's BertConfig says; sharding.py holds the device mesh and every sharding rule.
"""
