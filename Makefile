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

# torch is pinned first: 2.13.0 is the CPU build this machine keeps on disk (an unpinned torch pulls a
# multi-GB CUDA build); the extras then find it satisfied. torch + jax take about a minute to install.
$(VENV)/.test: $(VENV)/.base
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[dev,torch,jax]'
	touch $@

demo: $(VENV)/.base
	$(PY) examples/run_demo.py

# one BLAS thread per test worker: two workers on a 2-core machine, each with a BLAS thread pool of its own,
# oversubscribe the cores (measured: 34 s -> 28 s for the suite here)
test: $(VENV)/.test
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q -n 2 -p no:cacheprovider tests

bench: $(VENV)/.base
	$(PY) benchmarks/sim_speed.py
	$(PY) benchmarks/cost_matmul.py
	$(PY) benchmarks/triton_side_by_side.py   # prints a note and skips unless triton and torch are installed

clean:
	rm -rf $(VENV) out
