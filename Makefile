# opennki: two commands set everything up on a fresh machine with python3 and make.
#   make demo  - create .venv, install, run the bundled example kernels (results vs NumPy, time, profile)
#   make test  - create .venv, install with test extras (torch, jax), run the whole suite

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test bench clean

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) install -e '.[dev]'
	touch $@

demo: $(VENV)/.base
	$(PY) examples/run_demo.py

test: $(VENV)/.test
	$(PY) -m pytest -q -n 2 -p no:cacheprovider tests

bench: $(VENV)/.base
	$(PY) benchmarks/run_benchmarks.py

clean:
	rm -rf $(VENV) out
