"""SST-2 with LoRA: rank-8 adapters on the attention projections; only the adapters and the
classifier are trained and checkpointed (about 0.5% of BERT-base's parameters)."""

from configs.finetune import sst2


def get_config():
    config = sst2.get_config()
    config.lora.rank = 8  # adapter rank r
    config.lora.alpha = 16.0  # scale alpha / r = 2
    config.lora.targets = (
        "query",
        "key",
        "value",
        "attention_output",
    )  # add "intermediate", "output" for the FFN
    config.optim.learning_rate = (
        5e-4  # adapters start at zero and need a far larger step than full fine-tuning
    )
    config.optim.weight_decay = 0.0  # the adapters are the whole update; do not shrink them
    config.train.num_epochs = 5.0  # adapters converge more slowly than full fine-tuning
    return config
