# kit: reproducible TensorFlow-vs-PyTorch benchmarks.
#   make reproduce   set up .venv and run the main study (quick profile without a GPU), then its report
#                    (HTML and LaTeX; PDF too where latexmk is installed, else a line says it was skipped)
#   make reproduce-all  every study whose profile fits this host, one after another (resumable: run it again),
#                    then one summary page, RUNS/reproduce-all/summary.html and .tex (BUDGET=2h skips what won't fit)
#   make test        set up .venv and run the fast test suite (under 5 minutes on 2 cores; no engine, Slurm or TeX)
#   make test-all    the whole suite: also the tests marked slow, engine, slurm, tex, browser, mount (CI runs it)
#   make selftest    check that this host measures what the kit says (kit selftest) before a long study
# Everything else is optional. Variables: PYTHON, VENV, PROFILE, BACKEND, RUNS, BUDGET, DRIVER, TORCH_INDEX,
# TORCH_PAIR, CPU_TORCH_PAIR, FULL_TORCH.

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.kit-installed
RUNS    ?= runs
SPEC    ?= experiments/florencio2019_lenet/experiment.toml
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
# On a host with an NVIDIA GPU the paper's protocol runs; elsewhere its quick profile.
PROFILE ?= $(if $(HAVE_GPU),paper,quick)
# Containers when an engine with GPU support is reachable, the local backend otherwise.
BACKEND ?= auto
FRAMEWORKS := $(if $(HAVE_GPU),gpu,cpu)
# torch and torchvision are pinned as a matching pair (torchvision's C++ ops need the exact torch).
TORCH_PAIR ?= torch==2.14.1 torchvision==0.29.1
# On an NVIDIA host the driver decides which CUDA build of torch can run: PyPI's torch 2.14 wheel is built for
# CUDA 13.0 (driver >= 580); older drivers get a CUDA 12 build from PyTorch's index. kit/doctor/drivers.py holds the
# driver table (python3 -m kit.doctor driver-check says what it chose and why).
DRIVER ?= $(if $(HAVE_GPU),$(shell nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1))
TORCH_INDEX ?= $(if $(DRIVER),$(shell $(PYTHON) -m kit.doctor torch-index $(DRIVER)))
# Without a GPU: the CPU builds (+cpu, no CUDA libraries: 0.8 GB in .venv instead of 5.3 GB) of the pair that
# images/matrix.toml's CPU row runs (pytorch-2.13-cpu), so local trials and that image run the same torch.
# kit.doctor torch-index --cpu picks each from PyTorch's CPU index (probed for a few seconds), else from this host's
# pip configuration (find-links, extra indexes). A +cpu torch without a +cpu torchvision is installed alone (the
# `cpu` extra has no torchvision, so nothing pulls the CUDA torch back): the model-zoo and Faster R-CNN studies then
# say they need torchvision (kit list, kit show, kit doctor) and reproduce-all skips them with the fix. Only without
# any +cpu torch does it fall back to TORCH_PAIR, PyPI's CUDA build, printing what it costs and how to avoid it.
# TORCH_INDEX=... on the command line skips the choice: TORCH_INDEX and TORCH_PAIR. FULL_TORCH=1 (CI sets it, to run
# every test, torchvision's included) installs TORCH_PAIR from PyPI on a CPU host too: the CUDA build, 5.3 GB.
CPU_TORCH_PAIR ?= torch==2.13.0 torchvision==0.28.0
FULL_TORCH ?=
TORCH_ARGS = $(if $(HAVE_GPU)$(TORCH_INDEX)$(FULL_TORCH),$(TORCH_INDEX) $(TORCH_PAIR),$$($(PY) -m kit.doctor torch-index \
	--cpu "$(CPU_TORCH_PAIR)" --default "$(TORCH_PAIR)" || echo "$(TORCH_PAIR)"))

.PHONY: setup reproduce reproduce-all test test-all test-rest lint report images doctor selftest clean distclean

$(STAMP): pyproject.toml
	$(if $(HAVE_GPU),$(PYTHON) -m kit.doctor driver-check $(DRIVER))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_ARGS)
	$(PY) -m pip install -q -e ".[$(FRAMEWORKS),dev]"
	touch $(STAMP)

setup: $(STAMP)

reproduce: setup
	$(VENV)/bin/kit run $(SPEC) --profile $(PROFILE) --backend $(BACKEND) --build-images --runs-dir $(RUNS)

# PROFILE as given on the command line or in the environment; otherwise auto (the kit's own GPU check picks paper
# where a GPU is, else paper-cpu for a study with the paper's CPU protocol, quick otherwise, and skips a study this
# host cannot run as written, saying why).
ALL_PROFILE := $(if $(filter command line environment,$(origin PROFILE)),$(PROFILE),auto)
reproduce-all: setup
	$(VENV)/bin/kit reproduce-all --profile $(ALL_PROFILE) --backend $(BACKEND) --build-images --runs-dir $(RUNS) \
		$(if $(BUDGET),--budget $(BUDGET))

# The fast default leaves out what starts the frameworks, renders whole reports or needs an engine, Slurm, TeX,
# Chromium or root mounts (pyproject.toml lists the markers); test-rest is exactly those, so test + test-rest
# (what .ci/run does) is test-all, each test once.
FAST := not slow and not engine and not slurm and not tex and not browser and not mount
test: setup
	$(PY) -m pytest -m "$(FAST)"

test-all: setup
	$(PY) -m pytest

test-rest: setup
	$(PY) -m pytest -m "not ($(FAST))"

lint: setup
	$(VENV)/bin/ruff check kit tests benchmarks experiments
	$(VENV)/bin/mypy
	@# the `kit new study` templates, written out as a study folder and checked as one (its relative imports)
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	  $(PY) -c 'import sys, pathlib; from kit.scaffold import new_study; new_study("scaffold_check", pathlib.Path(sys.argv[1]))' "$$d" && \
	  cd "$$d" && MYPYPATH=$(CURDIR) $(abspath $(VENV))/bin/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir /dev/null \
	    scaffold_check/analysis.py scaffold_check/report.py scaffold_check/model.py

# Re-make the report of the newest run (or RUN=runs/<dir>).
RUN ?= $(lastword $(sort $(wildcard $(RUNS)/*/)))
report: setup
	$(VENV)/bin/kit report $(RUN) --format html,latex,pdf

# The images this host needs (GPU rows with a GPU-capable engine, CPU rows otherwise), then check them from inside.
images: setup
	$(VENV)/bin/kit images build
	$(VENV)/bin/kit images verify

doctor: setup
	$(VENV)/bin/kit doctor

selftest: setup
	$(VENV)/bin/kit selftest

clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache build dist *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
