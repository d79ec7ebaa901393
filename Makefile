# Every target that needs Python builds a venv first (once: a stamp file
# remembers that the pins were installed, and a second run installs nothing).
# The Python is the python3 on PATH, or the one named: make test
# PYTHON=python3.13. Its version picks the lock file of the exact pins,
# requirements/lock-py<major.minor>.txt (the newest one past 3.13), and the
# venv: .venv for Python 3.11 (the pinned environment CI runs), .venv-py3.X
# for any other, so that changing Python never mixes two environments.
PYTHON ?= $(shell command -v python3)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
ifeq ($(PY_VERSION),)
$(error PYTHON=$(PYTHON) does not run: name a Python 3.11 or later)
endif
LOCK ?= $(or $(wildcard requirements/lock-py$(PY_VERSION).txt),requirements/lock-py3.13.txt)
VENV ?= $(if $(filter 3.11,$(PY_VERSION)),.venv,.venv-py$(PY_VERSION))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# TORCH=cpu (or cu126, ...): take torch from PyTorch's own index of that
# build, e.g. the CPU build (about 1 GB less than the CUDA build that PyPI
# serves on Linux) on a laptop with no NVIDIA GPU: make lab TORCH=cpu.
# It applies when the venv is built (a fresh clone, or after make clean).
TORCH ?=
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/$(TORCH)
# One data cache for the lessons and the tests (see docs/handbook.md, "Data").
export D2LPAR_DATA ?= $(CURDIR)/data
PYTEST_FLAGS ?= -n 2 --dist loadscope -p no:cacheprovider --durations=15
NBVAL_FLAGS := --nbval-lax --nbval-current-env --nbval-cell-timeout=300 \
	--sanitize-with tests/nbval_sanitize.cfg

.PHONY: venv lab test test-unit test-notebooks notebooks check-notebooks \
	figures slides bench clean messages dist test-reach lint lib

venv: $(STAMP)

$(STAMP): $(LOCK) requirements-nodeps.txt pyproject.toml
	@test ! -x $(PY) || $(PY) -c 'import sys; sys.exit("%d.%d" % \
		sys.version_info[:2] != "$(PY_VERSION)")' || \
		{ echo "$(VENV) has another Python: building it again"; \
		  rm -rf $(VENV); }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH),$(PIP) --index-url $(TORCH_INDEX_URL) \
		"$$(grep -m1 '^torch==' $(LOCK))")
	$(PIP) -r $(LOCK)
	$(PIP) --no-deps -r requirements-nodeps.txt
	$(PIP) --no-deps --no-build-isolation -e .
	touch $(STAMP)

# JupyterLab's menus in the language of the machine's locale (LC_ALL,
# LC_MESSAGES, LANG), or in LAB_LANG=fr|tr|zh|en (not LANG: that is the
# locale itself): tools/lab_language.py writes the choice as a default
# setting under build/, read through JUPYTER_CONFIG_PATH.
# Root (a container) has to say so to Jupyter.
lab: $(STAMP)
	config=$$($(PY) tools/lab_language.py $(LAB_LANG)) && \
	JUPYTER_CONFIG_PATH="$$config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	$(VENV)/bin/jupyter lab notebooks/ \
		$(if $(filter 0,$(shell id -u)),--allow-root)

# Regenerate notebooks/<lang>/<framework>/*.ipynb from notebooks/<lang>/*.md,
# and the solutions of the exercises, notebooks/<lang>/<framework>/solutions/
notebooks:
	$(PYTHON) tools/notebooks.py build

# Copy the #@save functions of the English lessons into the generated part
# of d2lpar/torch.py and d2lpar/mxnet.py (tools/library.py). After editing
# a lesson: make notebooks lib.
lib:
	$(PYTHON) tools/library.py build

# Fails when a committed notebook, or a backend's generated part, does not
# match the lessons (stdlib only).
check-notebooks:
	$(PYTHON) tools/notebooks.py check
	$(PYTHON) tools/library.py check

# The message catalogs of d2lpar (d2lpar/locale, see tools/messages.py):
# extract the strings of the code into d2lpar.pot, merge it into each
# language's .po (translate what arrives empty or fuzzy there, then run
# this again), and compile the .mo files that are committed.
messages: $(STAMP)
	$(PY) tools/messages.py

# Redraw the SVG pictures of the lessons, one per language
# (notebooks/img/<lang>/).
figures: $(STAMP)
	$(PY) tools/figures.py

# A reveal.js slideshow per lesson, language and framework, for a room with
# no network: build/slides/<lang>/<framework>/<chapter>.slides.html and
# build/slides/index.html; reveal.js and MathJax come from pinned packages
# and are copied into build/slides/_static/ (tools/slides.py, docs/handbook.md).
slides: $(STAMP)
	$(PY) tools/slides.py

# The pytest workers share the cores, so each process (test, notebook
# kernel, training process) computes with one OpenMP thread: threads that
# outnumber the cores spin against each other, which made one ResNet
# training cell of lesson 3 six times slower.
TEST_ENV := OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),1)

# Package tests, then every notebook under nbval (the solutions notebooks
# in notebooks/<lang>/<framework>/solutions/ too), in one pytest run.
# tests/test_classroom.py runs the English lesson 2 (its two notebooks, 2a
# and 2b) of each framework twice in one kernel, and compares the checked
# outputs of each run as nbval does: its first run is nbval's, which is
# therefore not repeated here.
CLASSROOM := $(foreach fw,pytorch mxnet,$(foreach ch,multiple-gpus \
	communication-cost,--ignore=notebooks/en/$(fw)/$(ch).ipynb))
# pycodestyle and pyflakes over the package, the tools and the tests
# (ruff; the rules are in pyproject.toml).
lint: $(STAMP)
	$(PY) -m ruff check d2lpar tools tests conftest.py

test: $(STAMP) check-notebooks lint
	$(TEST_ENV) $(PY) -m pytest tests notebooks $(CLASSROOM) $(NBVAL_FLAGS) \
		$(PYTEST_FLAGS)

test-unit: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest tests $(PYTEST_FLAGS)

test-notebooks: $(STAMP)
	$(TEST_ENV) $(PY) -m pytest notebooks $(NBVAL_FLAGS) $(PYTEST_FLAGS)

# Ratios against real peers and physical limits, measured in one run
# (build/bench/results.md and .json; about 5 minutes on 2 cores).
bench: $(STAMP)
	$(PY) -m tools.bench

clean:
	rm -rf $(VENV) build .pytest_cache

# A wheel and an sdist of d2lpar under dist/, for a kernel that already has
# PyTorch (Colab, a cluster's module): pip install dist/d2lpar-*.whl adds
# only what is missing and keeps the installed torch and numpy.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w dist .

# The reach of the PyTorch track (.ci/run runs it on Python 3.13): a fresh
# venv gets torch and numpy 2 first, as Colab has them, then d2lpar with
# its test tools from the ranges of pyproject.toml, which must keep that
# torch and numpy; then the unit tests and the English PyTorch lessons
# under nbval. The MXNet tests are deselected where MXNet is missing, and
# the run's last lines say which (conftest.py).
REACH_VENV ?= build/reach-py$(PY_VERSION)
REACH_PY := $(REACH_VENV)/bin/python
# The torch and numpy 2 of requirements/lock-py3.13.txt
REACH_PREINSTALLED ?= $(shell grep -E '^(torch|numpy)==' \
	requirements/lock-py3.13.txt)
# Not here: the pictures are compared byte for byte with those the pinned
# matplotlib drew (make test checks them), and the browser test needs
# Chromium (make test runs it).
REACH_IGNORE ?= --ignore=tests/test_figures.py --ignore=tests/browser
test-reach: check-notebooks
	rm -rf $(REACH_VENV)
	$(PYTHON) -m venv $(REACH_VENV)
	$(REACH_PY) -m pip install --quiet --disable-pip-version-check \
		$(REACH_PREINSTALLED)
	$(REACH_PY) -m pip list --format=freeze | grep -iE '^(torch|numpy)==' \
		> $(REACH_VENV)/before.txt
	$(REACH_PY) -m pip install --quiet --disable-pip-version-check \
		-e '.[test,lab]'
	$(REACH_PY) -m pip install --quiet --disable-pip-version-check \
		--no-deps -r requirements-nodeps.txt
	$(REACH_PY) -m pip list --format=freeze | grep -iE '^(torch|numpy)==' \
		> $(REACH_VENV)/after.txt
	@cat $(REACH_VENV)/before.txt
	@cmp -s $(REACH_VENV)/before.txt $(REACH_VENV)/after.txt || \
		{ echo 'pip install -e .[test] changed torch or numpy:'; \
		  diff $(REACH_VENV)/before.txt $(REACH_VENV)/after.txt; exit 1; }
	$(TEST_ENV) $(REACH_PY) -m pytest tests notebooks/en/pytorch \
		$(REACH_IGNORE) $(CLASSROOM) $(NBVAL_FLAGS) $(PYTEST_FLAGS)

# --- The browser test on every notebook, and the GPU runners ---------------
.PHONY: test-browser test-gpu test-gpu-rehearsal wheelhouse

# Every notebook in JupyterLab, in headless Chromium (make test runs two of
# them; D2LPAR_BROWSER_NOTEBOOKS=en/pytorch/multiple-gpus,... picks others).
# Screenshots: build/browser/<lang>-<framework>-<chapter>.png.
test-browser: $(STAMP)
	D2LPAR_BROWSER_NOTEBOOKS=all $(PY) -m pytest tests/browser -v -rs \
		-p no:cacheprovider

# On a GPU node (a cluster's node, our GPU runner): its own Python with
# torch and numpy already installed, maybe no network. PYTHON= names that
# Python; build/gpu-venv-py3.X sees its packages (--system-site-packages)
# and gets d2lpar and the test tools: from WHEELHOUSE= with no network at
# all (pip --no-index), else from the index; the node's torch and numpy
# must come out unchanged (tools/wheelhouse.py install checks). Then it
# fails at once when no GPU is visible, runs the checks of tests/gpu alone
# (their timings need an idle GPU; D2LPAR_REQUIRE_GPU=1 makes a missing GPU
# fail them, elsewhere they skip), and runs every English PyTorch lesson on
# the GPU (tools/gpu_lessons.py: lesson 1 alone, then the others side by
# side): the executed notebooks, their figures and a summary go to
# build/gpu/; their solutions notebooks too. D2LPAR_MIN_GPUS=2 requires
# two GPUs; GPU_NOTEBOOKS= picks other notebooks. Offline, the lessons
# train on data/ (copy it along) or say that they use the stand-in data
# set.
#   make test-gpu PYTHON=/path/to/node/python3.12 WHEELHOUSE=wheelhouse-py3.12
GPU_VENV ?= build/gpu-venv-py$(PY_VERSION)
GPU_PY := $(GPU_VENV)/bin/python
GPU_OUT ?= build/gpu
WHEELHOUSE ?=
GPU_NOTEBOOKS ?= $(wildcard notebooks/en/pytorch/*.ipynb \
	notebooks/en/pytorch/solutions/*.ipynb)
GPU_ALONE ?= auto-parallelism
# make test-gpu-rehearsal (or D2LPAR_REHEARSAL=1): the same steps on a
# machine with no GPU: the driver check and the GPU requirement of
# tests/gpu are lifted (the GPU checks skip), the lessons run on the CPU.
D2LPAR_REHEARSAL ?=
GPU_ENV := D2LPAR_REHEARSAL=$(D2LPAR_REHEARSAL)
test-gpu: check-notebooks
	$(GPU_ENV) $(PYTHON) tools/gpu_check.py --driver
	$(PYTHON) tools/wheelhouse.py venv $(GPU_VENV)
	$(GPU_PY) tools/wheelhouse.py install \
		$(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE))
	$(GPU_ENV) $(GPU_PY) tools/gpu_check.py
	rm -rf $(GPU_OUT) && mkdir -p $(GPU_OUT)
	$(GPU_ENV) $(if $(filter 1,$(D2LPAR_REHEARSAL)),,D2LPAR_REQUIRE_GPU=1) \
		$(GPU_PY) -m pytest tests/gpu -v -rs -p no:cacheprovider \
		--junitxml=$(GPU_OUT)/tests-gpu.xml
	$(GPU_PY) tools/gpu_lessons.py --out $(GPU_OUT) \
		$(foreach n,$(GPU_ALONE),--alone $(n)) $(GPU_NOTEBOOKS)

test-gpu-rehearsal:
	$(MAKE) --no-print-directory test-gpu D2LPAR_REHEARSAL=1

# The wheels make test-gpu needs on a node with no network, for the node's
# Python version (WHEELHOUSE_PYTHON=3.12; by default PYTHON's) and Linux
# x86-64: d2lpar's own wheel, its other dependencies and the test tools,
# never torch, numpy or an NVIDIA wheel (the node has them), at most 60 MB
# (tools/wheelhouse.py checks, and prints the size). Run it where there is
# a network, with that Python if you have it (pip reads the requirements'
# markers for the Python that runs it), and copy the folder to the node.
WHEELHOUSE_PYTHON ?= $(PY_VERSION)
WHEELHOUSE_DIR ?= build/wheelhouse-py$(WHEELHOUSE_PYTHON)
wheelhouse:
	$(PYTHON) tools/wheelhouse.py build --python-version \
		$(WHEELHOUSE_PYTHON) --dest $(WHEELHOUSE_DIR)
