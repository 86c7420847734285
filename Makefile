# fastloader: `make demo` (the main job on a built-in sample) and `make test` set themselves up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
BASE_STAMP := $(VENV)/.base-installed
DEPS_STAMP := $(VENV)/.deps-installed
BUILD_STAMP := $(VENV)/.fastloader-built
FULL_STAMP := $(VENV)/.extras-installed
NATIVE_SOURCES := $(wildcard csrc/*.cpp csrc/*.h csrc/video/*.cpp csrc/video/*.h) CMakeLists.txt pyproject.toml

.PHONY: install install-full test test-native test-fallback test-quick test-slow lint docs demo bench clean wheel

# Two layers, each with its stamp, so `make demo` then `make test` installs only what is missing:
# `install` (what the demo needs: torch, the package with no extras, its build tools; ~1 GB) and
# `install-full` (the test and bench extras and DALI, for test/lint/bench: ~3 GB in all).
install: $(BUILD_STAMP)

install-full: $(BUILD_STAMP) $(FULL_STAMP)

# torch is pinned to 2.13.0: the CPU build that lies on this machine's disk (any other request
# downloads a multi-GB CUDA build). Build tools go in the venv so rebuilds skip build isolation
# and reuse build/ incrementally.
$(BASE_STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q "scikit-build-core>=0.10" "nanobind>=2.0" ninja cmake
	touch $@

$(BUILD_STAMP): $(BASE_STAMP) $(NATIVE_SOURCES)
	$(PIP) install -q --no-build-isolation -e .
	touch $@

$(DEPS_STAMP): $(BASE_STAMP)
	# DALI is optional (the [dali] extra): its tests run where it installs and skip, saying
	# why, where it cannot (no wheel for this platform, no network). `make test` lists the
	# skips at its end, and CI (FASTLOADER_EXPECT_DALI=1) fails when DALI is missing.
	$(PIP) install -q nvidia-dali-cuda120 || echo "WARNING: NVIDIA DALI could not be installed: its tests will be SKIPPED" >&2
	# FFmpeg's headers for fastloader._video (tools/ffmpeg_dev.sh: apt as root, else a warning);
	# the editable install of $(FULL_STAMP) then builds the module.
	bash tools/ffmpeg_dev.sh
	touch $@

# The extras on top, once (pip keeps what is there; a later source change rebuilds through
# $(BUILD_STAMP) alone).
$(FULL_STAMP): $(DEPS_STAMP) pyproject.toml | $(BUILD_STAMP)
	$(PIP) install -q --no-build-isolation -e '.[test,bench]'
	touch $@

# pytest's options for every pass. -rs lists each skipped test with its reason (conftest.py
# sums the skips up by reason); XDIST runs the tests on every core (pytest-xdist, `make test
# XDIST=` for one process). A shared fixture is built once per worker.
PYTEST := $(PY) -m pytest -q -rs -p no:cacheprovider
XDIST ?= -n auto --dist worksteal

test: install-full
	$(MAKE) --no-print-directory test-native
	$(MAKE) --no-print-directory test-fallback

# Every test but the slow ones, with the C++ extension.
test-native: install-full
	$(PYTEST) $(XDIST) tests

# Again through the Pillow/numpy fallback, as if the extension had not been built: the tests
# whose outcome can depend on it. Those marked native need the extension; those marked
# native_neutral assert nothing the fallback changes (conftest.py fails one whose own process
# asks for the extension): both are left out. See pyproject.toml's markers.
test-fallback: install-full
	FASTLOADER_DISABLE_NATIVE=1 $(PYTEST) $(XDIST) -m "not slow and not native and not native_neutral" tests

# The edit loop (a few minutes): the tests with the extension but those marked heavy (that
# start processes, servers or clusters, or run for seconds); `make test` runs all of them.
test-quick: install-full
	$(PYTEST) $(XDIST) -m "not slow and not heavy" tests

# The `slow`-marked tests (soak and speed runs that print their figures), excluded from
# `make test`; .ci/run runs them too. -s shows what they print.
# The installed-package soaks (exit noise, lost Ctrl-C) run once, against the wheel (make wheel).
test-slow: install-full
	$(PY) -m pytest -q -s -rs -p no:cacheprovider -m "slow and not gpu and not installed" tests

lint: install-full
	$(PY) -m ruff check src tests benchmarks tools
	$(PY) -m mypy

# The guide (docs/*.md, Markdown read by myst-parser) and the API reference from the
# docstrings (Sphinx; warnings are errors) in docs/_build/html.
docs: install
	$(PY) -m pip install -q "sphinx>=7" "myst-parser>=2"
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

demo: install
	$(PY) benchmarks/demo.py

# The full comparison on a 1000-image ImageNet-like tree (several minutes); see BENCHMARKS.md.
bench: install-full
	$(PY) benchmarks/bench_loader.py --repeats 5 --formats LMDB HDF5 "tiled LMDB"
	$(PY) benchmarks/plot.py benchmarks/results/loader.jsonl

# A self-contained wheel in dist/ (the system's libjpeg-turbo vendored into fastloader.libs/, or a
# static 3.x with FASTLOADER_JPEG_ROOT; manylinux tag), then checked in a fresh venv with the
# system's libjpeg masked: see tools/wheel.sh. Needs no `make install`.
wheel:
	PYTHON=$(PYTHON) bash tools/wheel.sh

clean:
	rm -rf build $(VENV) .pytest_cache .mypy_cache .ruff_cache demo_data docs/_build
