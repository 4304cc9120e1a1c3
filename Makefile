# Quick start: `make demo` and `make test`, each from a clean clone.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export XLA_FLAGS ?= --xla_force_host_platform_device_count=8

.PHONY: install lint test test-fast test-unicode demo bench clean

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed

# ruff (config: ruff.toml): the formatter owns layout, the linter finds bugs and dead code.
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# 3 workers on 2 cores: the bucket and signal tests spend much of their time waiting (retries,
# a stopped server, a process start), and a third worker fills those gaps; worksteal hands a
# worker that ran dry half of another's queue, so the slow tests do not end on one worker alone.
# Measured on 2 cores: -n 2 --dist load 18-22 min (one worker idle the last 8), this 15-20 min
# (docs/testing.md: the machine's speed varies by a third between runs).
test: lint
	$(PY) -m pytest -q -ra -n 3 --dist worksteal --durations=30 $(PYTEST_ARGS) tests

# Everything but tests marked slow (multi-process, kill/resume trials).
test-fast: install
	$(PY) -m pytest -q -ra -m "not slow" $(PYTEST_ARGS) tests

# The tokenizer tests on all 1,112,064 code points, not a sample of every kind (about 4 min on 2
# cores); run when a tokenizer changes. docs/data_prep.md, "Tokenizer parity".
test-unicode: install
	BERT_JAX_EVERY_CODE_POINT=1 $(PY) -m pytest -q -n 2 tests/unit/bert_jax/text/tokenization/test_differential.py \
		tests/unit/bert_jax/text/tokenization/test_sentencepiece.py

# The demo draws its plots with matplotlib: the demo extra.
$(VENV)/.demo: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[demo]'
	touch $@

demo: $(VENV)/.demo
	$(PY) -m examples.demo --out_dir=demo_out

# Benchmarks print their figures (never run by the tests); see bench/README.md for all of them.
# data_prep_bench measures peak memory with psutil: the bench extra.
$(VENV)/.bench: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]'
	touch $@

bench: $(VENV)/.bench
	$(PY) -m bench.data_prep_bench

clean:
	rm -rf $(VENV) demo_out *.egg-info
