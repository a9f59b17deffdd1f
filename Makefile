# Commands, each doing its own set-up on a fresh machine:
#   make demo   creates .venv, installs flowrl, trains the tiny-cpu recipe (a few minutes on 2 cores)
#   make test   creates .venv, installs flowrl with test extras, runs pytest without the slow end-to-end runs
#   make test-slow  the slow end-to-end runs that make test leaves out (pytest -m slow); CI runs both
#   make lint   ruff check and ruff format --check over the tree (the rules: pyproject.toml [tool.ruff])
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch/torchvision pinned to the builds lying on this machine's disk (pip takes them without a download);
# elsewhere pip fetches the same versions from PyPI.
TORCH ?= torch==2.14.1 torchvision==0.29.1

.PHONY: demo test test-slow lint install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[test,tesseract,clip,audio]"
	$(BIN)/pip install -q --no-deps nudenet==3.4.2
	touch $@

install: $(VENV)/.installed

# one thread per process unless OMP_NUM_THREADS says otherwise: on shared cores a second thread oversubscribes them
# and the tiny models run about ten times slower (make demo DEMO_THREADS=2 on idle cores)
DEMO_THREADS ?= $(or $(OMP_NUM_THREADS),1)

demo: install
	@echo "make demo: OMP_NUM_THREADS=$(DEMO_THREADS) (torch threads; on shared cores more oversubscribe them, set DEMO_THREADS=N to change)"
	OMP_NUM_THREADS=$(DEMO_THREADS) HF_HUB_OFFLINE=1 $(BIN)/flowrl train overwrite=true  # a rerun replaces the previous demo run

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow"

test-slow: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
