# lookup-knowledge: `make demo` (install + ingest the sample knowledge base + a few lookups), `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
LK     := $(BIN)/lookup-knowledge

.PHONY: install dev demo test lint render clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# setuptools warns on every editable install of a mapped package layout (a UserWarning, not ours
# to fix); the wheel build is checked warning-free by tests/test_public_api.py.
EDITABLE := PYTHONWARNINGS=ignore::UserWarning $(BIN)/pip install -q -e

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0  # the CPU build first, so nothing pulls a CUDA torch
	$(EDITABLE) '.[all]'
	touch $@

$(VENV)/.dev-installed: $(VENV)/.installed
	$(EDITABLE) '.[all,dev]'
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

demo: install
	$(LK) ingest lookup_knowledge/sample-kb
	$(LK) query "Who must approve a refund above 500 EUR?"
	$(LK) query "如何申请增值税专用发票"
	$(LK) query "PCI DSS rules for card data in the payments.events Kafka topic" --json

# Two workers, a test file each at a time (module fixtures built once), each on its own core.
test: dev
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: dev
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

render: install
	$(LK) render --out visualizations

clean:
	rm -rf .lookup-knowledge .pytest_cache
