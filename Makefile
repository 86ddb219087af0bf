# The two commands a fresh machine needs:
#   make lab    install (once) and open the course in JupyterLab on 127.0.0.1
#   make test   install (once) and run the whole test suite (unit tests + every notebook under nbval)
# Everything lives in ./.venv; nothing is installed outside it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch. pip finds it in the local wheel folder of the course machines (PIP_FIND_LINKS);
# elsewhere add  --index-url https://download.pytorch.org/whl/cpu  via TORCH_FLAGS. Pinning the +cpu build
# means pip fails loudly instead of silently downloading a multi-GB CUDA build.
TORCH       ?= torch==2.13.0+cpu
TORCH_FLAGS ?=
PORT        ?= 8888
PYTEST_ARGS ?=

.PHONY: install lab test bench clean
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_FLAGS) "$(TORCH)"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	$(PY) -m mgpu_helpers.doctor
	touch $@

# Jupyter refuses to run as root unless told; a container's root user is common enough to allow it.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: install
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 --port=$(PORT) $(ROOT_FLAG) --notebook-dir=. notebooks/00_setup.ipynb

test: install
	$(PY) -m pytest tests notebooks solutions exercises --nbval-lax --nbval-current-env \
	    --nbval-cell-timeout=600 -p no:randomly $(PYTEST_ARGS)

bench: install
	$(PY) -m mgpu_helpers.bench launch

clean:
	rm -rf $(VENV)
