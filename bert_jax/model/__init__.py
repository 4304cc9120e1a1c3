"""The model: BERT or the ModernBERT block in Flax NNX.

encoder.py       the encoder and the pre-training model, field by field
bert_config.py   BertConfig: the encoder's hyper-parameters
layers.py        the blocks, the encoder layer and the MLM head
layer_stack.py   the layers run or scanned in groups
rope.py          rotary position embeddings
attention.py     the attention kernels
dropout.py       the dropout masks
mixed_matmul.py  bfloat16 matmuls at a CPU's bf16 instruction speed
sharding.py      the device mesh and every sharding rule (the model's logical axes on it)
"""
