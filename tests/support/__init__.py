"""Helpers the tests import (no tests here): `from support import golden`, `from support.forkrun
import Server`. tests/ is on sys.path because tests/conftest.py lives there (pytest's rootdir
conftest), so every test module, in tests/unit/* or tests/e2e, imports these by one name.

  golden            the repository's paths, the golden records' data facts, small configs on them
  tiny              the tiny model's shape, from configs/tiny.py (one home for it)
  finetune_data     the synthetic fine-tuning files and the tiny Hugging Face BERT they train
  checkpoints       comparing the parameters of two training runs
  buckets           records and uploads for the bucket (gs://) tests
  tokenizer_oracle  a plain-Python transcription of google-research/bert's FullTokenizer
  unicode_sample    which code points the tokenizer tests try by default
  make_wiki_dump    MediaWiki dumps (and Parquet) with each article's expected text; also
                    `python -m tests.support.make_wiki_dump` for bench/ and examples/data
  make_odd_unicode  writes data_prep/testdata/odd_unicode.txt, the golden test's input
  forkrun           a fork server: a binary's main() in a forked child, without the imports
                    (conftest.py's `forkserver` fixture: one per pytest worker)
  jax_cache         the workers' compilation caches adopting each other's finished entries
  fake_gcs          fake-gcs-server on localhost, flaky_proxy: 503s and stalls in front of it
  sweep_integrity, sweep_inputs   the bad-input sweep's cases (tests/e2e/test_bad_input_sweep.py)
"""
