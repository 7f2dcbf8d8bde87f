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
	test-mutation test-notebooks test-site test-pdf test-gpu test-compat student bench clean lint format check

help:
	@echo "The two commands:"
	@echo "  make book      set up, execute every chapter, build the HTML book into $(BUILD)/html and its PDF"
	@echo "  make test      set up and run every check (lint, library, notebooks, book build, browser)"
	@echo "Working on the book:"
	@echo "  make check     lint and library tests: the quick loop while changing the library"
	@echo "  make lint      ruff over the library, tools and tests; the chapters' code at 79 columns"
	@echo "  make format    format the library, tools and tests (ruff) and the chapters' code (79 columns)"
	@echo "  make sync      rewrite chapters/*.ipynb from chapters/*.md after editing a chapter"
	@echo "  make diagrams  redraw book/images/diagrams/*.svg from their sources (attnbook_book.diagrams)"
	@echo "  make pdf       print the built HTML book into $(PDF) (and the site's root)"
	@echo "  make test-pdf  check that PDF: every chapter, bookmarks, contents, glyphs, margins, links"
	@echo "  make execute html test-site BUILD=_build/one NB=chapters/04_queries_keys_values.ipynb PARTIAL=1"
	@echo "                 execute, build and check one chapter"
	@echo "  make test-lib  the library, exercise, grading and book-source tests (no notebooks, no browser)"
	@echo "  make test-mutation  every exercise's checker against the mutants of its solution, uncached"
	@echo "  make student   write the chapter notebooks without solutions into $(BUILD)/student"
	@echo "  make setup     the virtual environment, the JavaScript assets and Chromium"
	@echo "  make clean     remove $(BUILD)"
	@echo "Elsewhere:"
	@echo "  make test-gpu  library tests and notebooks on CUDA (needs a GPU)"
	@echo "  make test-compat  the lowest declared versions of the dependencies: library tests, two chapters"
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
# Jupyter shows them, and every build draws them again (a test fails if a committed file is stale).
diagrams: python-env
	$(PY) -m attnbook_book.diagrams write

sync: python-env
	$(PY) -m attnbook_book.notebooks sync

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
	$(PY) -m pytest tests -m "not site and not pdf" -p no:cacheprovider

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

test-pdf: python-env
	ATTNBOOK_HTML=$(BUILD)/html ATTNBOOK_PDF=$(PDF) $(PY) -m pytest tests -m pdf -p no:cacheprovider

test-gpu: python-env
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'make test-gpu needs a CUDA GPU')"
	ATTNBOOK_DEVICE=cuda $(PY) -m pytest tests -m "not site and not pdf" -p no:cacheprovider
	ATTNBOOK_DEVICE=cuda $(NBVAL) $(NB)

# The promise of pyproject.toml, tested: the lowest declared version of every dependency (the library's and
# the extras the tests use) in an environment of its own, with this machine's torch (the only one it has),
# then the library, exercise and grading tests and two chapters that use every one of them.
# onnxruntime floats: its floor (1.18) needs numpy >= 1.24.2, above numpy's own floor.
COMPAT := $(BUILD)/compat
COMPAT_PY := $(COMPAT)/venv/bin/python
COMPAT_NB := chapters/03_bahdanau_attention.ipynb chapters/10_vision_transformer.ipynb

test-compat:
	rm -rf $(COMPAT)
	$(PYTHON) -m venv $(COMPAT)/venv
	$(COMPAT_PY) -m pip install -q torch==2.13.0
	$(COMPAT_PY) book/_ext/attnbook_book/floors.py pyproject.toml --extras test,hf,export,grade --skip torch \
		--float onnxruntime > $(COMPAT)/floors.txt
	$(COMPAT_PY) -m pip install -q -r $(COMPAT)/floors.txt nbval jupytext
	$(COMPAT_PY) -m pip install -q --no-deps -e . -e book/_ext
	$(COMPAT_PY) -m pip check
	$(COMPAT_PY) -m pip list --format=freeze > $(COMPAT)/installed.txt
	$(COMPAT_PY) -m pytest tests/lib tests/exercises tests/grading -m "not site and not pdf" -p no:cacheprovider
	$(COMPAT_PY) -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=900 -p no:cacheprovider $(COMPAT_NB)

bench: python-env
	@for script in benchmarks/bench_*.py; do echo "== $$script"; $(PY) $$script; done

clean:
	rm -rf $(BUILD)
