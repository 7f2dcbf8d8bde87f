# Attention, Step by Step: `make book` builds the HTML book, `make test` runs every check.
# Both set everything up on a fresh machine first (virtual environment, npm assets, Chromium).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
BUILD ?= _build
# NB: the notebooks to execute (default: every chapter). PARTIAL=1 builds a book of only the executed
# chapters, without -W (for working on one chapter; `make test` always builds the whole book strictly).
NB ?= $(sort $(wildcard chapters/[0-9][0-9]_*.ipynb))
PARTIAL ?=
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# Models that chapters export for their pages (attnbook.export) go next to the executed notebooks; the
# build copies them into the site. Without it (Jupyter, Colab) they go to ./exported.
ATTNBOOK_EXPORT_DIR := $(abspath $(BUILD))/executed/exported
export ATTNBOOK_EXPORT_DIR
export PYTHONUNBUFFERED := 1
# One compute thread per process: on a small shared machine, PyTorch's thread pool spinning against other
# processes made some tests 5 to 15 times slower. Override with OMP_NUM_THREADS=N.
OMP_NUM_THREADS ?= 1
export OMP_NUM_THREADS
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# Notebooks and browser tests run in parallel (pytest-xdist), one notebook whole per worker; 0 runs them in turn.
JOBS ?= 2
NBVAL := $(PY) -m pytest -p attnbook_book.pytest_plugin --nbval-lax --nbval-current-env \
	--nbval-cell-timeout=900 -p no:cacheprovider \
	--executed-dir $(BUILD)/executed --times-report $(BUILD)/reports/execution_times.json

LINTED := lib book/_ext tests benchmarks

.PHONY: help setup python-env npm-assets chromium poppler diagrams sync execute html pdf book test test-lib \
	test-mutation test-notebooks test-site test-jupyter test-pdf test-gpu test-compat test-colab pin student bench \
	clean lint format check

help:
	@echo "The two commands:"
	@echo "  make book      set up, execute every chapter, build the HTML book into $(BUILD)/html and its PDF"
	@echo "  make test      set up and run every check (lint, library, notebooks, book build, browser)"
	@echo "Working on the book:"
	@echo "  make check     lint and library tests: the quick loop while changing the library"
	@echo "  make lint      ruff over the library, tools and tests; the chapters' code at 79 columns"
	@echo "  make format    format the library, tools and tests (ruff) and the chapters' code (79 columns)"
	@echo "  make sync      rewrite chapters/*.ipynb from chapters/*.md after editing a chapter"
	@echo "  make pin       after a version change in pyproject.toml: the setup cells install that release"
	@echo "  make diagrams  redraw book/images/diagrams/*.svg from their sources (attnbook_book.diagrams)"
	@echo "  make pdf       print the built HTML book into $(PDF) (and the site's root)"
	@echo "  make test-pdf  check that PDF: every chapter, bookmarks, contents, glyphs, margins, links"
	@echo "  make execute html test-site BUILD=_build/one NB=chapters/04_queries_keys_values.ipynb PARTIAL=1"
	@echo "                 execute, build and check one chapter"
	@echo "  make test-lib  the library, exercise, grading and book-source tests (no notebooks, no built book)"
	@echo "  make test-mutation  every exercise's checker against the mutants of its solution, uncached"
	@echo "  make test-jupyter  a chapter's explorers and progress bars in JupyterLab 4, driven in Chromium"
	@echo "  make student   write the chapter notebooks without solutions into $(BUILD)/student"
	@echo "  make setup     the virtual environment, the JavaScript assets and Chromium"
	@echo "  make clean     remove $(BUILD)"
	@echo "Elsewhere:"
	@echo "  make test-gpu  library tests and notebooks on CUDA (needs a GPU)"
	@echo "  make test-compat  the lowest declared versions of the dependencies: library tests, two chapters"
	@echo "  make test-colab   Colab's environment (its published versions): the setup cells' install, every chapter"
	@echo "  make bench     run the benchmarks in benchmarks/ (slow)"

# --- set-up -------------------------------------------------------------------------------------
setup: python-env npm-assets chromium poppler

python-env: $(VENV)/.installed
$(VENV)/.installed: requirements.txt pyproject.toml book/_ext/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	touch $@

npm-assets: node_modules/.installed
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# Debian's Chromium for the browser tests (Playwright drives it; it never downloads a browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the browser tests"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# The PDF edition: poppler-utils (pdftotext, pdfinfo, pdffonts, pdftoppm) for its checks, and a font with the
# Chinese characters of the glossary (Debian's Droid Sans Fallback), which Chromium prints with.
poppler:
	@{ command -v pdftotext && fc-list ':charset=6fc0' | grep -q .; } >/dev/null 2>&1 || { \
		echo "installing Debian's poppler-utils and fonts-droid-fallback for the PDF"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq poppler-utils fonts-droid-fallback >/dev/null; }

# --- the book -----------------------------------------------------------------------------------
# The diagrams are drawn by code (book/_ext/attnbook_book/diagrams/); the SVG files are committed so that
# Jupyter shows them, and every build draws them again (a test fails if a committed file is stale). Each has a
# PNG beside it, drawn from the SVG by Chromium when the SVG changed, which the paired notebooks carry (Colab's
# markdown draws no SVG data URL); the PNG records its SVG's sha256, so a test finds a stale one without a browser.
diagrams: python-env
	$(PY) -m attnbook_book.diagrams write

sync: python-env
	$(PY) -m attnbook_book.notebooks sync

# After changing the version in pyproject.toml: every chapter's setup cell installs that release (tag vX.Y.Z)
# and the Colab buttons (_config.yml) open the notebooks at that tag.
pin: python-env
	$(PY) -m attnbook_book.notebooks pin

# Execute every chapter once with nbval: the asserts in the cells are the checks, the outputs are kept
# for the build, and each chapter's time goes to $(BUILD)/reports/execution_times.json.
execute: python-env
	$(if $(PARTIAL),,rm -rf $(BUILD)/executed)
	$(NBVAL) --student -n $(JOBS) --dist loadfile $(NB)

# Build the HTML from the notebooks `execute` just ran, with warnings as errors.
html: python-env npm-assets diagrams
	$(PY) -m attnbook_book.notebooks stage $(BUILD)/executed $(BUILD)/src $(if $(PARTIAL),--partial)
	rm -rf $(BUILD)/site
	$(BIN)/jupyter-book build $(BUILD)/src --path-output $(BUILD)/site -n $(if $(PARTIAL),,-W) --keep-going
	rm -rf $(BUILD)/html
	mv $(BUILD)/site/_build/html $(BUILD)/html
	$(PY) -m attnbook_book.notebooks embed $(BUILD)/html/_sources/chapters >/dev/null
	@echo "The book is in $(BUILD)/html/index.html"

# The PDF edition: Chromium prints the built pages into one book (attnbook_book.pdf), offline; a copy goes to
# the site's root, where every page's sidebar links to it.
PDF := $(BUILD)/pdf/attention-step-by-step.pdf
pdf: python-env poppler
	$(PY) -m attnbook_book.pdf $(BUILD)/html $(PDF) --copy-into-site

book: setup sync execute html pdf

student: python-env
	$(PY) -m attnbook_book.notebooks student $(BUILD)/student

# --- checks -------------------------------------------------------------------------------------
test: setup
	$(MAKE) lint
	$(MAKE) test-lib
	$(MAKE) test-notebooks
	$(MAKE) html
	$(MAKE) pdf
	$(MAKE) test-site
	$(MAKE) test-jupyter
	$(MAKE) test-pdf
	$(MAKE) student

# Lint: ruff (pyproject.toml) over the Python code; the chapters' code cells through their paired notebooks
# (chapters/ruff.toml: 79 columns, the width of the page's code column).
lint: python-env
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check chapters/*.ipynb

format: python-env
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)
	$(PY) -m attnbook_book.codestyle
	$(PY) -m attnbook_book.notebooks sync

check: lint test-lib

test-lib: python-env
	$(PY) -m pytest tests -m "not site and not pdf and not jupyter" -p no:cacheprovider

# Mutation testing of every exercise's checker, without the cache that test-lib's run keeps: the score per
# exercise and chapter, and the killable mutants still accepted, in $(BUILD)/reports/mutation.{json,md}.
test-mutation: python-env
	$(PY) -m attnbook_book.mutation --no-cache --jobs 2 --out $(BUILD)/reports

test-notebooks: execute

# The browser tests two at a time, then Lighthouse's audit of the pages alone: it simulates a slow phone from
# the CPU time the pages take here, which other work on the machine would inflate.
test-site: python-env
	ATTNBOOK_HTML=$(BUILD)/html $(PY) -m pytest tests -m "site and not lighthouse" -p no:cacheprovider -n $(JOBS)
	ATTNBOOK_HTML=$(BUILD)/html $(PY) -m pytest tests -m lighthouse -p no:cacheprovider

# A chapter with explorers and progress bars run in JupyterLab 4 (ipywidgets 8), driven in Chromium
# (tests/book/test_frontends.py; make test-colab runs it in the classic Notebook with Colab's ipywidgets 7).
test-jupyter: python-env chromium
	$(PY) -m pytest tests -m jupyter -p no:cacheprovider

test-pdf: python-env
	ATTNBOOK_HTML=$(BUILD)/html ATTNBOOK_PDF=$(PDF) $(PY) -m pytest tests -m pdf -p no:cacheprovider

test-gpu: python-env
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu needs a CUDA GPU')"
	ATTNBOOK_DEVICE=cuda $(PY) -m pytest tests -m "not site and not pdf and not jupyter" -p no:cacheprovider
	ATTNBOOK_DEVICE=cuda $(NBVAL) $(NB)

# The promise of pyproject.toml, tested: the lowest declared version of every dependency (the library's and the
# extras the tests use) in an environment of its own, at the lowest Python requires-python admits (pyenv's), with
# torch at its floor from the registry (its CUDA build, run on the CPU): the library, exercise and grading tests
# and chapters that use what sets the floors (float16 and nn.RMSNorm on the CPU, torch.nn.attention, GradScaler on
# the CPU). Then torch at the export extra's own floor (torch.compiler.is_exporting): the export's tests and a
# chapter with a model in the page. Most of its time goes to downloading torch, twice.
# onnxruntime floats: its floor (1.18) needs numpy >= 1.24.2, above numpy's own floor.
# setuptools at the build-system floor, with wheel (which setuptools 68 needs to build): tests/lib/test_install.py
# builds the package without build isolation.
COMPAT := $(BUILD)/compat
COMPAT_PY := $(COMPAT)/venv/bin/python
COMPAT_NB := chapters/03_bahdanau_attention.ipynb chapters/09_1_flash_attention.ipynb \
	chapters/10_vision_transformer.ipynb chapters/11_modern_tweaks.ipynb chapters/14_1_memory_and_precision.ipynb
COMPAT_EXPORT_NB := chapters/16_what_attention_learns.ipynb
FLOORS := $(PY) book/_ext/attnbook_book/floors.py pyproject.toml
PYTHON_FLOOR = $(shell sed -n 's/^requires-python = ">=\([0-9.]*\)"$$/\1/p' pyproject.toml)
SETUPTOOLS_FLOOR = $(shell sed -n 's/^requires = \["setuptools>=\([0-9.]*\)"\]$$/\1/p' pyproject.toml)
COMPAT_NBVAL := $(COMPAT_PY) -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=900 -p no:cacheprovider

test-compat: python-env
	rm -rf $(COMPAT)
	mkdir -p $(COMPAT)
	$$($(PY) -m attnbook_book.colab python $(PYTHON_FLOOR)) -m venv $(COMPAT)/venv
	$(FLOORS) --extras test,hf,export,grade --skip torch --float onnxruntime > $(COMPAT)/floors.txt
	$(COMPAT_PY) -m pip install -q torch==$$($(FLOORS) --floor torch) -r $(COMPAT)/floors.txt nbval jupytext \
		setuptools==$(SETUPTOOLS_FLOOR) wheel
	$(COMPAT_PY) -m pip install -q --no-deps -e . -e book/_ext
	$(COMPAT_PY) -m pip check
	$(COMPAT_PY) -m pip list --format=freeze > $(COMPAT)/installed.txt
	$(COMPAT_PY) -m pytest tests/lib tests/exercises tests/grading -m "not site and not pdf and not jupyter" \
		-p no:cacheprovider --deselect tests/lib/test_export.py
	$(COMPAT_NBVAL) $(COMPAT_NB)
	$(COMPAT_PY) -m pip install -q torch==$$($(FLOORS) --extras export --floor torch)
	$(COMPAT_PY) -m pip check
	$(COMPAT_PY) -m pip list --format=freeze > $(COMPAT)/installed-export.txt
	$(COMPAT_PY) -m pytest tests/lib/test_export.py -p no:cacheprovider
	$(COMPAT_NBVAL) $(COMPAT_EXPORT_NB)
	du -sh $(COMPAT)/venv

# Where learners run the book: Colab's environment as Colab publishes it (book/_ext/attnbook_book/
# colab_constraints.txt, with its date): Colab's Python from pyenv, torch at Colab's version from the registry
# (its CUDA build, run on the CPU; with the CUDA build's own NCCL, not the one Colab's CPU runtime holds for
# other packages), every package a chapter uses at Colab's version; then the library installed as the setup
# cells install it (the same requirements and extras, the library from this checkout), which must change none
# of those packages; then every chapter executed there, and the classic Notebook front end (ipywidgets 7, the
# widgets Colab draws) driven in Chromium. Its environment: 5.8 GB of disk, built in 8 minutes; the chapters: 26 minutes (one run).
COLAB := $(BUILD)/colab
COLAB_PY := $(COLAB)/venv/bin/python
COLAB_TOOL := book/_ext/attnbook_book/colab.py
COLAB_PACKAGES := pip torch numpy pandas matplotlib plotly scikit-learn scipy tqdm regex ipywidgets \
	widgetsnbextension jupyterlab_widgets ipython ipykernel jupyter_client nbformat nbconvert notebook protobuf \
	transformers tokenizers pytest jupytext PyYAML

test-colab: python-env chromium
	rm -rf $(COLAB)
	mkdir -p $(COLAB)/attnbook
	$$($(PY) -m attnbook_book.colab python) -m venv $(COLAB)/venv
	grep -v '^nvidia-' book/_ext/attnbook_book/colab_constraints.txt > $(COLAB)/constraints.txt
	$(COLAB_PY) -m pip install -q -c $(COLAB)/constraints.txt $(COLAB_PACKAGES)
	$(COLAB_PY) -m pip install -q -c $(COLAB)/constraints.txt nbval pytest-xdist
	$(COLAB_PY) -m pip install -q --no-deps -e book/_ext
	$(COLAB_PY) $(COLAB_TOOL) changed $(COLAB_PY) --ignore nvidia-nccl-cu13
	cp pyproject.toml README.md $(COLAB)/attnbook/ && cp -r lib $(COLAB)/attnbook/
	$(COLAB_PY) $(COLAB_TOOL) install $(NB) --local $(COLAB)/attnbook --constraints $(COLAB)/constraints.txt
	$(COLAB_PY) $(COLAB_TOOL) changed $(COLAB_PY) --ignore nvidia-nccl-cu13
	$(COLAB_PY) -m pip list --format=freeze > $(COLAB)/installed.txt
	ATTNBOOK_EXPORT_DIR=$(abspath $(COLAB))/executed/exported $(COLAB_PY) -m pytest -p attnbook_book.pytest_plugin \
		--nbval-lax --nbval-current-env --nbval-cell-timeout=900 -p no:cacheprovider -n $(JOBS) --dist loadfile \
		--executed-dir $(COLAB)/executed --times-report $(COLAB)/execution_times.json $(NB)
	ATTNBOOK_JUPYTER_UI=classic ATTNBOOK_JUPYTER_PYTHON=$(abspath $(COLAB_PY)) $(PY) -m pytest tests -m jupyter \
		-p no:cacheprovider
	$(if $(wildcard $(BUILD)/reports/execution_times.json),$(PY) -m attnbook_book.colab times \
		$(COLAB)/execution_times.json $(BUILD)/reports/execution_times.json)
	du -sh $(COLAB)/venv

bench: python-env
	@for script in benchmarks/bench_*.py; do echo "== $$script"; $(PY) $$script; done

clean:
	rm -rf $(BUILD)
