# Two commands, both from a fresh clone:
#   make reproduce   set everything up and run the cpu-profile reproduction (all notebooks, papermill)
#   make test        set everything up, lint (ruff) and run the test suite (unit, recorded-response,
#                    notebook tests)
#   make lab         open the notebooks in JupyterLab (LAB_ARGS, e.g. "--no-browser --port 8890")

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= runs/reproduce
PROFILE ?= cpu
WORLD ?= sandbox
# More `vsearcher-lite reproduce` options, e.g. REPRODUCE_ARGS="--only 07 08" or "--only 06 -p MAX_STEPS=300" (a 300-step SFT run)
REPRODUCE_ARGS ?=

.PHONY: install test reproduce reference lab clean-notebooks lint-notebooks clean

# torch is installed first and on its own, pinned: pip then takes the local CPU build, and no
# later requirement can pull a CUDA build (every other package accepts the installed 2.13.0).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[notebooks,dev]"
	touch $@

install: $(VENV)/.installed

# Two test processes, each taking whole test files (the notebook tests share one run folder, in
# order); TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2

test: install
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Writes RUN_DIR/notebooks/ (executed notebooks + HTML), RUN_DIR/summary.json (every stage's metrics,
# exam accuracy of base/SFT/RL, wall time and peak memory per notebook) and RUN_DIR/report.html.
reproduce: install
	$(VENV)/bin/vsearcher-lite reproduce --run-dir $(RUN_DIR) --profile $(PROFILE) --world $(WORLD) $(REPRODUCE_ARGS)

# JupyterLab on notebooks/ (the venv's own, so the kernel imports this package).
LAB_ARGS ?=
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(LAB_ARGS)

# The full-length reference run (SFT to 2 epochs, 25 GRPO steps, every held-out and exam task), written
# to data/reference/. Hours on 2 cores, minutes on a GPU; rerun the same command after an interruption.
REFERENCE_RUN_DIR ?= runs/reference
DEVICE ?= auto
reference: install
	$(VENV)/bin/vsearcher-lite reference run --run-dir $(REFERENCE_RUN_DIR) --device $(DEVICE)

# Strip outputs, execution counts and widget state from the notebooks (run before committing).
clean-notebooks: install
	$(PY) -m vsearcher_lite.notebooks --clean notebooks/*.ipynb

clean:
	rm -rf $(VENV) runs .pytest_cache
