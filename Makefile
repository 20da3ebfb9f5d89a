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

.PHONY: help install sandbox-tool lab test grade release autograde execute clean

help:
	@echo "make lab                  open JupyterLab on the student notebooks"
	@echo "make test                 run every test (unit, notebooks, release sync, grading)"
	@echo "make grade NB=path.ipynb  grade one notebook with the hidden tests"
	@echo "make release              regenerate notebooks/ from solutions/"
	@echo "make autograde            grade submitted/<student>/<chapter>/ (new or changed ones), write feedback and grades.csv"
	@echo "make autograde FORCE=1    regrade every submission"
	@echo "make execute              re-execute the solution notebooks in place (after editing them)"
	@echo "make clean                remove .venv and caches (never the gradebook, submissions or grades)"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
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

# Two workers with one thread each: on a 2-core machine that is faster than one worker with
# two threads (the notebooks' small tensors gain little from a second thread).
TEST_WORKERS ?= 2
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=notebooks/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb"; exit 2; }
	$(BIN)/python -m course_utils.grading grade "$(NB)"

release: $(STAMP)
	$(BIN)/python -m course_utils.grading release

# Limits per submission: GRADING_NOTEBOOK_S, GRADING_CELL_S, GRADING_MEMORY_MB, GRADING_PROCESSES
# (defaults in course_utils/grading/sandbox.py, Limits); the gradebook is backed up to gradebook-backups/ first.
autograde: $(STAMP)
	$(BIN)/python -m course_utils.grading autograde $(if $(FORCE),--force)

execute: $(STAMP)
	$(BIN)/python -m course_utils.grading execute $(or $(NB),solutions)

# Grading results are the instructor's (gradebook.db holds the hand-graded answers): clean keeps
# gradebook.db, gradebook-backups/, submitted/, autograded/, feedback/ and grades.csv.
clean:
	rm -rf $(VENV) .pytest_cache
	find . -name __pycache__ -type d -not -path './.venv/*' -prune -exec rm -rf {} +
