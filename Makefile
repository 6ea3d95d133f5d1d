# Set-up and checks. `make reproduce` and `make test` create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED_DATA := $(abspath ../shared/data)
export SYMFORMER_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

.PHONY: venv reproduce test test-slow test-oldest bench lint docs clean

$(BIN)/symformer: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first: the CPU wheel served locally (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev,bench,hf,docs,triton]"
	touch $(BIN)/symformer

venv: $(BIN)/symformer

reproduce: venv
	$(BIN)/symformer reproduce --quick --out out/reproduce

test: venv
	$(BIN)/python -m pytest -q -n 2 tests

test-slow: venv
	$(BIN)/python -m pytest -q -m slow --runslow tests

# the fast suite on the oldest torch symformer supports (2.3.1, with the numpy < 2 it was built against), in
# .venv-oldest; `make test-oldest PY=python3.10` for the oldest Python too. PyPI has only torch 2.3.1's CUDA build
# (about 5 GB with its libraries). transformers is installed without the hf extra, which needs torch >= 2.6:
# transformers 5 disables older PyTorch and the HF tests skip saying so (on Python 3.10 it does not install at all).
OLD := .venv-oldest/bin
test-oldest:
	test -x $(OLD)/python || $(PY) -m venv .venv-oldest
	$(OLD)/pip install -q "torch==2.3.1" "numpy<2"
	$(OLD)/pip install -q -e ".[dev,bench]" "torch==2.3.1" "numpy<2"
	$(OLD)/pip install -q "transformers>=5.24" || echo "transformers 5.24 needs Python 3.11: the HF tests skip"
	$(OLD)/python -m pytest -q -n 2 tests

bench: venv
	$(BIN)/symformer bench --quick --out out/bench

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# the documentation site into out/site (mkdocs build --strict); without the docs extra: one line, exit 2
docs: venv
	@$(BIN)/python docs/gen/build.py

clean:
	rm -rf $(VENV) .venv-oldest out .pytest_cache
