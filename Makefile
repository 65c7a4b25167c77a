# The two commands of the lab series (see README.md), and a quicker test run:
#   make series   create .venv on first use, then execute every notebook headless
#                 (on this machine's GPU, or on the CPU executor where there is none),
#                 writing executed notebooks, timing plots (PNG) and tables (JSON) to results/
#   make test     create .venv on first use, then run the unit tests and strict nbval
#                 over every notebook (what CI runs)
#   make check    create .venv on first use, then run the fast subset of the unit tests (those
#                 marked `check`): every module of labkit loaded and exercised, in about a minute
#                 on two cores (half that once the kernel cache, ~/.cache/labkit, is warm)
#
# make clean removes .venv, results and student; make clean-cache removes the kernel cache
# ($LABKIT_CACHE_DIR, else ~/.cache/labkit).
#
# GPU=cuda12|cuda13|none picks the CuPy build (default: from nvidia-smi's CUDA version).
# LABKIT_BACKEND=cpu|cuda forces a backend.

comma := ,
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
GPU ?= $(if $(CUDA_MAJOR),$(if $(filter 12,$(CUDA_MAJOR)),cuda12,cuda13),none)
# Test files run in parallel (pytest-xdist), one process more than there are cores: part of the time
# a worker waits (a notebook's kernel starting, a grading job in a child process), and the extra one
# fills it (two cores, a cold kernel cache: 12m51s against 13m44s, one run each).  A notebook stays in
# one process.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) + 1 )))
EXTRAS := lab,reference$(if $(filter cuda12 cuda13,$(GPU)),$(comma)$(GPU),)

.PHONY: series test check env lab student clean clean-cache

$(VENV)/.installed-$(GPU): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	rm -f $(VENV)/.installed-*
	touch $@

env: $(VENV)/.installed-$(GPU)

series: env
	$(PY) -m labkit.course.series --out results

test: env
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --nbval --nbval-sanitize-with notebooks/nbval_sanitize.cfg

# The tests marked `check`; tests/test_check_selection.py fails if they leave a module of labkit
# unloaded.  Two cores: 63 s with an empty kernel cache, 35 s warm.
check: env
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m check tests

# JupyterLab at the repository root, opening the notebooks: student/ (make student) is reachable too.
# lab/share/jupyter on JUPYTER_PATH: labextensions/labkit-cuda-language opens the .cu exercises with
# C++ highlighting (its source in lab/cuda-language/).
lab: env
	JUPYTER_PATH=$(CURDIR)/lab/share/jupyter$(if $(JUPYTER_PATH),:$(JUPYTER_PATH)) $(VENV)/bin/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/notebooks

# The student version of the series (solutions removed) in student/.
student: env
	$(PY) -m labkit.course.student_copy notebooks/ student/

clean:
	rm -rf $(VENV) results student

# The kernel cache, where labkit looks for it: $LABKIT_CACHE_DIR, else ~/.cache/labkit (an empty
# LABKIT_CACHE_DIR counts as unset, as labkit reads it).  Only what labkit writes there is
# removed (cpu-executor/: the CPU executor's compiled kernels; autotune/: the autotuner's winners;
# ceilings.json: the measured ceilings),
# then the folder itself if nothing else is left in it: a LABKIT_CACHE_DIR that names a shared
# folder loses nothing else.
LABKIT_CACHE := $(strip $(or $(strip $(LABKIT_CACHE_DIR)),$(if $(strip $(HOME)),$(strip $(HOME))/.cache/labkit)))

clean-cache:
	$(if $(LABKIT_CACHE),,$(error clean-cache: neither LABKIT_CACHE_DIR nor HOME is set: nothing removed))
	rm -rf '$(LABKIT_CACHE)/cpu-executor' '$(LABKIT_CACHE)/autotune' '$(LABKIT_CACHE)/ceilings.json' '$(LABKIT_CACHE)'/.ceilings.json.*.tmp
	@rmdir '$(LABKIT_CACHE)' 2>/dev/null || true
