# Set-up and checks. `make reproduce` and `make test` create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED_DATA := $(abspath ../shared/data)
export SYMFORMER_DATA ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA),)

.PHONY: venv reproduce test test-slow bench lint docs clean

$(BIN)/symformer: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first: the CPU wheel served locally (an unpinned torch pulls a multi-GB CUDA build)
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[dev,bench,hf,docs]"
	touch $(BIN)/symformer

venv: $(BIN)/symformer

reproduce: venv
	$(BIN)/symformer reproduce --quick --out out/reproduce

test: venv
	$(BIN)/python -m pytest -q -n 2 tests

test-slow: venv
	$(BIN)/python -m pytest -q -m slow --runslow tests

bench: venv
	$(BIN)/symformer bench --quick --out out/bench

lint: venv
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

# the documentation site into out/site (mkdocs build --strict); without the docs extra: one line, exit 2
docs: venv
	@$(BIN)/python docs/gen/build.py

clean:
	rm -rf $(VENV) out .pytest_cache
