# Two commands a newcomer needs:  `make lab` (the course) and `make test` (every test).
# Both create .venv if it is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed first, on its own, only if the environment has none:
# torch==2.13.0 is the CPU wheel where a local wheel house provides it. To use a
# CUDA build instead:  make lab TORCH="torch>=2.4"   (or install torch in .venv first).
TORCH ?= torch==2.13.0

.PHONY: lab test setup bench clean

setup: $(VENV)/.installed

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[course,test]"
	touch $@

lab: setup
	$(BIN)/jupyter lab notebooks/00_welcome.ipynb

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python -m milktea.bench kernels

clean:
	rm -rf $(VENV) results .pytest_cache
