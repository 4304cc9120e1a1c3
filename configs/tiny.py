"""A tiny BERT for tests (L=2, H=32, A=2): compiles and steps in seconds on CPU."""

from configs import default


def get_config():
    config = default.get_config()
    # bert-base-uncased's vocabulary, as every record file of the test suite; the other configs
    # take it from the data's manifest (0). Data with a larger vocabulary needs 0 here.
    config.model.vocab_size = 30522
    config.model.hidden_size = 32  # width; 2 heads of 16
    config.model.num_hidden_layers = 2  # two layers still exercise the layer stack and remat
    config.model.num_attention_heads = 2  # divisible by a 2-way tensor mesh axis in tests
    config.model.intermediate_size = 64  # 2x hidden (4x elsewhere): small compiles
    config.model.max_position_embeddings = 128  # enough for the L=128 test records
    # Training for tests and smoke runs: a few steps of small batches, frequent everything.
    config.train.global_batch_size = 8
    config.train.num_train_steps = 20
    config.train.log_every_steps = 5
    config.optim.warmup_steps = 2
    config.optim.learning_rate = 1e-3
    config.eval.every_steps = 10
    config.eval.num_examples = 64
    config.eval.batch_size = 16
    config.checkpoint.every_steps = 10
    return config
