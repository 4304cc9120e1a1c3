"""Fine-tuning defaults shared by every task config (configs/finetune/<task>.py overrides them).

Hyper-parameters are the original BERT paper's fine-tuning recipe (batch 32, 3 epochs, peak
learning rate 2e-5 with 10% linear warmup then linear decay, dropout 0.1, weight decay 0.01) with
the optimizer and schedule of transformers and of current practice: AdamW *with* bias correction
(eps 1e-8, torch.optim.AdamW's) and the decay measured from the end of warmup, so the peak rate is
reached (transformers' get_linear_schedule_with_warmup). docs/finetuning.md says why, and how to
get the original BERT optimizer back:
    --config.optim.bias_correction=False --config.optim.eps=1e-6 --config.optim.decay_from=start
Mesh and optimizer fields are the pre-training config's (configs/default.py) with fine-tuning
values; override any field on the command line, e.g. `--config.optim.learning_rate=3e-5`.
"""

import ml_collections
from ml_collections import config_dict

from configs import default


def get_config() -> ml_collections.ConfigDict:
    pretrain = default.get_config()
    config = ml_collections.ConfigDict()

    # The pre-trained model: a Hugging Face BERT directory or a pre-training workdir of ours
    # (it has checkpoints/). The --init flag sets it; it is saved with the run's checkpoints.
    config.init = ""

    # --- Data (bert_jax/finetune/tasks.py) ---
    d = config.data = ml_collections.ConfigDict()
    d.format = "glue"  # "glue" (TSV, classification/regression), "conll" (tagging), "squad" (spans)
    d.layout = "sst2"  # glue only: sst2, cola, mrpc, mnli, stsb, qqp, qnli, rte, wnli (glue.py)
    d.train_file = ""  # training data; "" only with --mode=predict
    # Files scored after training (and every eval.every_steps), comma-separated, each reported
    # under its file name: MNLI's "dev_matched.tsv,dev_mismatched.tsv". "" turns eval off.
    d.eval_files = ""
    d.test_file = ""  # predictions for it go to <workdir>/predictions/ at the end; "" for none
    d.vocab_file = ""  # vocab.txt; "" takes <init>/vocab.txt (Hugging Face directories have one)
    # Lower-case text before WordPiece; None takes the init directory's tokenizer_config.json,
    # else True (uncased BERT).
    d.do_lower_case = config_dict.placeholder(bool)
    d.max_seq_length = 128  # pieces per input, [CLS] and [SEP]s included; longer text is cut
    # Label names in id order; () takes the GLUE layout's, or the training file's CoNLL tags.
    d.labels = ()
    d.metric = ""  # the figure that judges a run ("" : accuracy, mcc, f1, pearson as the benchmark)
    d.tag_column = -1  # conll only: which column holds the tags (-1: last, NER; 1: POS)
    # squad only (the values of google-research/bert's run_squad.py):
    d.doc_stride = 128  # pieces between the starts of two windows over a long context
    d.max_query_length = 64  # question pieces kept
    d.max_answer_length = 30  # longest answer span predicted, in pieces
    d.n_best_size = 20  # start and end candidates tried per window
    d.version_2_with_negative = False  # SQuAD 2.0: questions may have no answer
    # v2.0: answer "" when the no-answer score beats the best span by more than this.
    d.null_score_diff_threshold = 0.0

    # --- Model: what fine-tuning may change; the rest comes from the checkpoint ---
    m = config.model = ml_collections.ConfigDict()
    m.hidden_dropout_prob = 0.1  # also the dropout before the classification/tagging head
    m.attention_probs_dropout_prob = 0.1
    m.dtype = "float32"  # computation dtype: "float32" or "bfloat16"
    m.remat = False  # recompute each layer's activations in the backward pass (saves memory)
    m.attention_impl = "auto"  # see configs/default.py
    # A ModernBERT block's sentence pooling ("cls" or "mean") and dropout before its classifier
    # (configs/default.py); unset: --init's (ModernBERT-base's config.json: "mean", 0.0).
    m.classifier_pooling = config_dict.placeholder(str)
    m.classifier_dropout = config_dict.placeholder(float)

    # --- LoRA (bert_jax/finetune/lora.py) ---
    lo = config.lora = ml_collections.ConfigDict()
    lo.rank = 0  # 0: full fine-tuning; r > 0: train only rank-r adapters and the head
    lo.alpha = 16.0  # adapter output scale is alpha / rank
    # Dense layers that get adapters: query, key, value, attention_output (attention);
    # add intermediate, output for the feed-forward layer.
    lo.targets = ("query", "key", "value", "attention_output")

    # --- Optimizer (bert_jax/training/optim.py): the pre-training fields, fine-tuning values ---
    o = config.optim = pretrain.optim
    o.learning_rate = 2e-5  # the paper's grid: 5e-5, 3e-5, 2e-5 (LoRA: about 1e-3)
    o.warmup_steps = 0  # > 0: warmup steps; 0: warmup_proportion of the run
    o.warmup_proportion = 0.1  # share of all steps spent warming up (run_classifier.py's 0.1)
    # transformers' AdamW and schedule, not the original BERT's (see the docstring):
    o.bias_correction = True  # textbook Adam moments; False: the original BERT's uncorrected ones
    o.eps = 1e-8  # torch.optim.AdamW's (the original BERT: 1e-6)
    o.decay_from = "warmup_end"  # the peak is reached; "start": the original's decay from step 0

    # --- Training loop (bert_jax/finetune/train.py) ---
    t = config.train = ml_collections.ConfigDict()
    t.batch_size = 32  # global batch: examples (SQuAD: windows) per step over all devices
    t.num_epochs = 3.0  # passes over the training data; steps = ceil(epochs * examples / batch)
    t.seed = 0  # head and adapter init, data order and dropout
    # Pack each step's examples several to a row (bert_jax/finetune/packed.py): the same
    # examples and per-example loss as unpacked, without the FLOPs on padding; also at eval and
    # prediction. Span tasks (SQuAD) are never packed: their windows fill max_seq_length.
    t.packing = True
    t.log_every_steps = 50  # train loss to metrics.jsonl / TensorBoard and a progress line
    # A step with a NaN/inf loss or gradients never changes the state; it is counted (metric
    # `nonfinite_steps`). "stop" (as pre-training): end the run at the next log line or save,
    # without saving, exporting or predicting; exit 1. "skip": warn and train on.
    t.on_nonfinite = "stop"

    # --- Evaluation on data.eval_files ---
    e = config.eval = ml_collections.ConfigDict()
    e.every_steps = 0  # also evaluate every N steps (0: only at the end)
    e.at_start = False  # also evaluate before the first step (the pre-trained baseline)
    e.batch_size = 64  # global eval batch; the last one is padded

    # --- Checkpoints (bert_jax/training/checkpoints.py): only trained parameters are saved ---
    c = config.checkpoint = ml_collections.ConfigDict()
    c.every_steps = 1000  # a killed run resumes from the last one
    c.max_to_keep = 1
    c.async_save = True

    # Write the final model (LoRA merged) as a transformers task model to <workdir>/export.
    config.export = True

    # --- Device mesh (bert_jax/model/sharding.py), as pre-training ---
    config.mesh = pretrain.mesh
    return config
