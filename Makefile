# Two commands a newcomer needs:  `make lab` (the course) and `make test` (every test).
# Both create .venv with $(PYTHON) if it is missing, and install the project into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed first, on its own, and only if .venv has none. torch==2.13.0 is
# the CPU wheel where a local wheel house provides it; elsewhere choose your build:
#   make lab TORCH="torch>=2.4"        (or install torch into .venv before `make lab`)
# Once a torch is in .venv, it is kept: pyproject.toml only asks for torch>=2.2.
TORCH ?= torch==2.13.0
# JupyterLab refuses to run as root unless told; containers often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

.PHONY: lab lab-zh test test-fast setup doctor bench strip lint i18n clean clean-numba

setup: $(VENV)/.installed

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "milktea needs Python 3.10 or newer (3.11 recommended); run: make PYTHON=python3.11 ..."'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH)"
	$(BIN)/python -m pip install -e ".[course,test]"
	touch $@

# The server's root is the course folder (this one): the file browser shows notebooks/ and
# exercises/ side by side, and the first chapter opens. LAB_ARGS: more options for JupyterLab
# (e.g. LAB_ARGS=--no-browser on a remote machine).
LAB_ARGS ?=
lab: setup
	$(BIN)/python -m jupyter lab $(ROOT_FLAG) --ServerApp.root_dir=. $(LAB_ARGS) notebooks/00_welcome.ipynb

# The Chinese edition (中文版), with JupyterLab's menus in Simplified Chinese: the language
# pack (course extra) is chosen by a settings override for this command only. The page gets
# the Chinese font milktea ships (a custom.css in a Jupyter config folder of its own, under
# .venv), so no system CJK font is needed; your own JupyterLab settings and workspaces stay.
LAB_ZH := $(abspath $(VENV))/lab-zh
JUPYTER_HOME_CONFIG = $$($(BIN)/python -c "from jupyter_core.paths import jupyter_config_dir as d; print(d())")
lab-zh: setup
	$(BIN)/python -m milktea.fonts lab-custom $(LAB_ZH)/custom
	JUPYTERLAB_SETTINGS_DIR="$${JUPYTERLAB_SETTINGS_DIR:-$(JUPYTER_HOME_CONFIG)/lab/user-settings}" \
	JUPYTERLAB_WORKSPACES_DIR="$${JUPYTERLAB_WORKSPACES_DIR:-$(JUPYTER_HOME_CONFIG)/lab/workspaces}" \
	JUPYTER_CONFIG_DIR=$(LAB_ZH) $(BIN)/python -m jupyter lab $(ROOT_FLAG) --LabApp.custom_css=True \
	  --LabApp.app_settings_dir=tools/lab-zh --ServerApp.root_dir=. $(LAB_ARGS) notebooks/zh/00_welcome.ipynb

# Every test, on as many workers as the machine has cores (pytest-xdist); the slowest are
# listed at the end. The folders say what a test costs: tests/unit (in-process),
# tests/integration (starts processes), tests/course (notebooks, browser, exercises).
PYTEST_WORKERS ?= auto
test: setup
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=25

# The edit-test loop: every in-process test, in a few minutes.
test-fast: setup
	$(BIN)/python -m pytest tests/unit -n $(PYTEST_WORKERS) --durations=10

doctor: setup
	$(BIN)/python -m milktea doctor

bench: setup
	$(BIN)/python -m milktea.bench kernels

# Notebooks are stored without outputs; the cell ids stay (the chapters name them).
# The same command runs before each commit (.pre-commit-config.yaml) and in the tests.
NOTEBOOKS := $(wildcard notebooks/*.ipynb exercises/*.ipynb solutions/*.ipynb tests/fixtures/*.ipynb \
                           notebooks/zh/*.ipynb exercises/zh/*.ipynb solutions/zh/*.ipynb)
strip: setup
	$(BIN)/python -m nbstripout --keep-id $(NOTEBOOKS)

lint: setup
	$(BIN)/python -m ruff check .

# The library's Chinese strings: collect every _() / N_() message from milktea/ into the
# template, merge it into the zh_CN catalog (translate the new entries there), compile
# the .mo that ships in the package. tests/unit/test_i18n.py fails when one step was skipped.
LOCALE := milktea/locale
i18n: setup
	$(BIN)/pybabel extract --no-location --sort-output -k N_ -k lazy -o $(LOCALE)/milktea.pot milktea solutions
	$(BIN)/pybabel update --ignore-obsolete -D milktea -i $(LOCALE)/milktea.pot -d $(LOCALE) -l zh_CN
	$(BIN)/pybabel compile -D milktea -d $(LOCALE) -l zh_CN --statistics

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis .ruff_cache

# numba caches each compiled loop beside its source and stamps it with that file alone:
# after editing a file whose loops others inline (milktea/numba_bits.py), drop the cache
clean-numba:
	rm -f milktea/__pycache__/*.nbi milktea/__pycache__/*.nbc milktea/__pycache__/*.compile-lock
