# The two commands of the quick start: `make demo` and `make test`.
# Each creates .venv and installs the project on a fresh clone with only python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test lint typecheck bench-client fmt clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/servetune demo

test: $(STAMP)
	bash scripts/ci-system-deps.sh
	bash scripts/provision_engines.sh
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench-client: $(STAMP)
	$(BIN)/python benchmarks/client_capacity.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
