# The course's commands. Each target creates .venv on first use and installs the course
# into it, so `make lab` and `make test` work on a fresh machine with Python 3.11 and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# nbgrader runs `alembic` by name when it creates a gradebook: the venv must be on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYTHONHASHSEED := 0

JUPYTER_ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

# The one thread setting for everything that executes the chapters: make execute (the stored
# outputs), make test and make test-portable (nbval), make grade and make autograde. One thread per
# process: float sums then round the same way in every run, and two test workers fill 2 cores.
# (make lab leaves the learner's default alone.)
THREADS ?= 1
RUNS_CHAPTERS := execute sync test test-portable grade autograde
$(RUNS_CHAPTERS): export OMP_NUM_THREADS = $(THREADS)
$(RUNS_CHAPTERS): export MKL_NUM_THREADS = $(THREADS)

# Each chapter's text source (jupytext percent format), the file people edit and review.
SOURCES = $(if $(NB),$(NB:.ipynb=.py),$(wildcard solutions/ch*/ch*.py))

.PHONY: help install sandbox-tool lab lint test test-portable grade release autograde sync execute bench clean

help:
	@echo "make lab                  open JupyterLab on the student notebooks"
	@echo "make test                 run every test (unit, notebooks, release sync, grading)"
	@echo "make grade NB=path.ipynb  grade one notebook with the hidden tests"
	@echo "make release              regenerate notebooks/ from solutions/"
	@echo "make autograde            grade submitted/<student>/<chapter>/ (new or changed ones), write feedback and grades.csv"
	@echo "make autograde FORCE=1    regrade every submission"
	@echo "make sync                 update solutions/*/*.ipynb from their text sources (.py), keeping outputs"
	@echo "make execute              sync, then re-execute the solution notebooks in place (NB=one notebook)"
	@echo "make test-portable        run the notebooks again under PyTorch's portable CPU kernel"
	@echo "make lint                 ruff on course_utils, tests, tools, benchmarks and the chapter sources"
	@echo "make bench                the performance tables, measured side by side (2-9 min on 2 cores; BENCH_QUICK=1: smaller)"
	@echo "make clean                remove .venv and caches (never the gradebook, submissions or grades)"

# Installing also configures nbdime as the diff driver of notebooks in this clone (its .git/config
# only, by absolute path, so it works without activating .venv; see .gitattributes); outside a
# git clone that step is skipped. Merges of notebooks stay git's own: regenerate them with
# `make execute` from the merged text sources instead.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	-git rev-parse --git-dir >/dev/null 2>&1 && \
	  git config diff.jupyternotebook.command "$(CURDIR)/$(BIN)/git-nbdiffdriver diff"
	@$(MAKE) --no-print-directory sandbox-tool
	touch $(STAMP)

# The grader runs every submission in a bubblewrap sandbox (course_utils/grading/sandbox.py).
# As root with apt-get (CI), install it; otherwise say how.
sandbox-tool:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing bubblewrap (the grader's sandbox)"; \
	  apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	else echo "NOTE: bubblewrap (bwrap) is missing: make autograde refuses to grade without it and make grade runs unsandboxed."; \
	  echo "      Install it: sudo apt-get install bubblewrap (Debian/Ubuntu), sudo dnf install bubblewrap (Fedora)."; fi

install: $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks $(JUPYTER_ROOT_FLAG)

lint: $(STAMP)
	$(BIN)/ruff check course_utils tests tools benchmarks conftest.py nbgrader_config.py solutions

# Two workers with one thread each: on a 2-core machine that is faster than one worker with
# two threads (the notebooks' small tensors gain little from a second thread).
TEST_WORKERS ?= 2
test: $(STAMP) lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

# The notebooks once more under another of PyTorch's CPU kernels, which rounds floats the way
# another machine does: every experiment claim must hold there too (CI runs it after make test).
PORTABLE_KERNEL ?= default
test-portable: $(STAMP)
	ATEN_CPU_CAPABILITY=$(PORTABLE_KERNEL) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope solutions

grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=notebooks/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb"; exit 2; }
	$(BIN)/python -m course_utils.grading grade "$(NB)"

release: $(STAMP)
	$(BIN)/python -m course_utils.grading release

# Limits per submission: GRADING_NOTEBOOK_S, GRADING_CELL_S, GRADING_MEMORY_MB, GRADING_PROCESSES
# (defaults in course_utils/grading/sandbox.py, Limits); the gradebook is backed up to gradebook-backups/ first.
autograde: $(STAMP)
	$(BIN)/python -m course_utils.grading autograde $(if $(FORCE),--force)

# The text sources are what people edit: sync brings each .ipynb's cells up to date from its
# .py and keeps the outputs of unchanged cells; execute then runs them. Commit a re-execution on
# its own, apart from the change to the chapter.
sync: $(STAMP)
	$(BIN)/jupytext --quiet --update --to ipynb $(SOURCES)

execute: sync
	$(BIN)/python -m course_utils.grading execute $(or $(NB),solutions)

# The course's performance claims as tables of ratios measured side by side in one run, each row with
# the machine's own ceiling (matmul peak, copy bandwidth) measured in the same run; one thread and
# all threads, and CUDA where present. Not part of make test. Prints the tables and saves them in
# benchmarks/results/ (latest.md: the full run the README quotes). BENCH_QUICK=1: smaller sizes.
bench: $(STAMP)
	$(BIN)/python -m benchmarks $(if $(filter-out 0,$(BENCH_QUICK)),--quick)

# Grading results are the instructor's (gradebook.db holds the hand-graded answers): clean keeps
# gradebook.db, gradebook-backups/, submitted/, autograded/, feedback/ and grades.csv.
clean:
	rm -rf $(VENV) .pytest_cache
	find . -name __pycache__ -type d -not -path './.venv/*' -prune -exec rm -rf {} +
