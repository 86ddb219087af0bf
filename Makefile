# The two commands a fresh machine needs:
#   make lab    install (once), bring the course into your workspace (workspace/, never overwritten: see
#               mgpu_helpers/tools/workspace.py) and open it in JupyterLab on 127.0.0.1
#   make test   install (once) and run the whole test suite (ruff, unit tests, every notebook under nbval,
#               the real-browser test)
# Everything lives in ./.venv; nothing is installed outside it.
# For a classroom:
#   make classroom      JupyterLab with projection mode on for every notebook (large fonts, thick lines)
#   make export         the whole course, run, as static HTML + slides in build/site (reads without a kernel)
#   make slides         slides only (reveal.js, offline), from the notebooks as committed, in build/site/slides
#   make test-browser   only the real-browser test: every notebook, as nbval ran it, in JupyterLab + headless
#                       Chromium (runs nbval first on the notebooks it finds no current run of)
# For maintainers (README.md, "Maintainers"):
#   make regenerate     after editing solutions/: run and keep outputs, write lessons/, the learner's copies
#   make lint           ruff check and ruff format --check (part of make test)
#   make bench          python -m mgpu_helpers.bench launch (the others: mgpu_helpers/bench/README.md)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch, by machine (mgpu_helpers/tools/install.py): on Linux without an NVIDIA GPU the CPU build below,
# looked up first where pip looks by default (the local wheel folder of PIP_FIND_LINKS, the configured
# indexes) and only then on PyTorch's CPU index (TORCH_INDEX); PyPI's default build with an NVIDIA GPU or on
# macOS. Pinning the +cpu build means pip fails loudly instead of silently downloading a multi-GB CUDA build.
# TORCH=torch takes PyPI's default build anywhere; TORCH_FLAGS adds pip flags to the torch step.
TORCH       ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_FLAGS ?=
PORT        ?= 8888
# The learner's own copy of the notebooks (git-ignored); `make lab WORKSPACE=~/mgpu-work` puts it elsewhere.
WORKSPACE   ?= workspace
export MGPU_WORKSPACE := $(abspath $(WORKSPACE))
PYTEST_ARGS ?=
# test-main runs on this many pytest-xdist workers, each test file (each notebook) kept on one worker
# (--dist loadfile: a notebook's cells share one kernel). 3 on a 2-core machine: the platform-resolution
# tests wait on PyPI, not the CPU. PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 3

.PHONY: install lab classroom test lint test-main test-browser regenerate export slides bench clean
install: $(VENV)/.installed

# The installer runs as a file, not as mgpu_helpers.tools.install: the package's __init__ needs its dependencies
# (lazy_loader), which this very step installs.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) mgpu_helpers/tools/install.py --torch "$(TORCH)" --cpu-index "$(TORCH_INDEX)" --torch-flags="$(TORCH_FLAGS)"
	$(PY) -m mgpu_helpers.tools.doctor
	touch $@

# Jupyter refuses to run as root unless told; a container's root user is common enough to allow it.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: install
	$(PY) -m mgpu_helpers.tools.workspace update
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) $(ROOT_FLAG) --notebook-dir=$(WORKSPACE) \
	    notebooks/00_setup.ipynb

classroom: install
	$(PY) -m mgpu_helpers.tools.workspace update
	MGPU_PROJECTION=1 $(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) $(ROOT_FLAG) --notebook-dir=$(WORKSPACE) \
	    notebooks/00_setup.ipynb

# The whole suite: unit tests and every notebook under nbval, then the real-browser test (a second pytest
# run, so each result stands alone; it skips, saying why, where chromium is missing). One after the other:
# the browser test opens the notebooks as test-main's nbval run left them in build/executed/
# (tests/keep_executed.py) instead of running them again. -k: the browser test runs even where the
# main run failed (it reports a notebook whose nbval run failed as failed, without opening it).
test: install
	$(MAKE) --no-print-directory -k lint test-main test-browser

# ruff's rules and format (pyproject.toml [tool.ruff]) over the library, the tests and the worked notebooks.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-main: install
	$(PY) -m pytest tests notebooks solutions exercises --nbval-lax --nbval-current-env \
	    --nbval-cell-timeout=600 -p no:randomly -m "not browser" -n $(PYTEST_WORKERS) --dist loadfile \
	    $(PYTEST_ARGS)

# Needs Debian's chromium at /usr/bin/chromium (apt-get install chromium); Playwright only drives it.
# Opens build/executed/*.ipynb, the notebooks as test-main's nbval ran them; where one is missing or was run
# from another version of its notebook, the test runs nbval on that notebook first.
test-browser: install
	$(PY) -m pytest tests/notebooks/test_browser.py -m browser -p no:randomly -rA $(PYTEST_ARGS)

# The maintainer's loop after editing solutions/NN_name.ipynb: run it and keep its outputs (refresh), write
# the library modules its `#| export` cells define (nbexport), then the learner's copies in notebooks/ and
# exercises/ (exercises generate), and the table of what each lesson uses in mgpu_helpers/README.md (lessonmap).
# NB=solutions/NN_name.ipynb refreshes one notebook only.
NB ?= solutions/*.ipynb
regenerate: install
	$(VENV)/bin/ruff format $(NB)
	$(PY) -m mgpu_helpers.tools.nbtools refresh $(NB)
	$(PY) -m mgpu_helpers.tools.nbexport
	$(PY) -m mgpu_helpers.tools.exercises generate
	$(PY) -m mgpu_helpers.tools.lessonmap

# reveal.js, MathJax, require.js and jQuery are fetched once with npm into build/vendor (not committed).
export: install
	$(PY) -m mgpu_helpers.tools.export --out build/site --execute --slides

slides: install
	$(PY) -m mgpu_helpers.tools.export --out build/site --slides

bench: install
	$(PY) -m mgpu_helpers.bench launch

# Deletes the installed packages only: never the workspace (your notebooks) nor build/mine (your kept code).
clean:
	@echo "make clean: deleting $(VENV)/ (the installed packages; make install puts them back)."
	@echo "Kept: your workspace $(WORKSPACE)/ and your kept code build/mine/."
	rm -rf $(VENV)
