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
RUNS_CHAPTERS := execute sync test unit test-portable test-cpus grade autograde hub-rehearsal mutants correct-notebooks
$(RUNS_CHAPTERS): export OMP_NUM_THREADS = $(THREADS)
$(RUNS_CHAPTERS): export MKL_NUM_THREADS = $(THREADS)
# Where the course checks itself, a claim that does not hold fails (course_utils/claims.py); in the
# learner's Lab it prints what it expected, what the run gave and the measured spread, and goes on.
$(RUNS_CHAPTERS): export COURSE_CLAIMS = strict

# Each chapter's text source (jupytext percent format), the file people edit and review.
SOURCES = $(if $(NB),$(NB:.ipynb=.py),$(wildcard solutions/ch*/ch*.py))

.PHONY: new-chapter help install sandbox-tool browser-tool lab lint test unit test-portable test-cpus test-browser site site-serve grade release autograde sync execute bench clean \
	hub-install hub-rehearsal mutants correct-notebooks update instructor-lab translations test-translations

help:
	@echo "make lab                  open JupyterLab on your own copy of the course (workspace/, never overwritten)"
	@echo "make lab LANG=zh_CN       the course in Chinese (中文版): workspace-zh_CN/, JupyterLab in Chinese"
	@echo "make update               bring new chapters and changes of the course into workspace/ (your edits kept)"
	@echo "make instructor-lab       JupyterLab on the course root with nbgrader's formgrader"
	@echo "make test                 run every test (unit, notebooks, release sync, grading)"
	@echo "make unit                 the unit tests of course_utils only (no notebook, grader, site or benchmark)"
	@echo "make grade NB=path.ipynb  grade one notebook with the hidden tests"
	@echo "make release              regenerate notebooks/ from solutions/ (LANG=zh_CN: the Chinese notebooks-zh_CN/)"
	@echo "make translations         bring the Chinese catalogues (locale/) up to date with the English sources"
	@echo "make test-translations    fail on any Chinese entry awaiting translation (new or fuzzy) or faulty; required before a release"
	@echo "make autograde            grade submitted/<student>/<chapter>/ (new or changed ones), write feedback and grades.csv"
	@echo "make autograde FORCE=1    regrade every submission"
	@echo "make autograde JOBS=4     grade 4 submissions at a time (default: from the cores)"
	@echo "make autograde LMS_PENDING=empty   grades_lms.csv leaves a chapter awaiting hand marks empty"
	@echo "make hub-rehearsal        a class on a local JupyterHub: release, fetch, submit, collect, autograde, feedback"
	@echo "make sync                 update solutions/*/*.ipynb from their text sources (.py), keeping outputs"
	@echo "make execute              sync, then re-execute the solution notebooks in place (NB=one notebook)"
	@echo "make test-portable        run the notebooks again on an emulated AVX2 laptop (tools/cpu_profiles.py)"
	@echo "make test-cpus            run the notebooks under every emulated CPU profile (avx2, then avx)"
	@echo "make site                 build the course site (learner's version, stored outputs) in site/_build/html"
	@echo "make site-serve           serve the built site on http://127.0.0.1:8000/"
	@echo "make test-browser         site and JupyterLab tests in headless Chromium (tests_site/)"
	@echo "make lint                 ruff on course_utils, the grader, tests, tools, benchmarks and the chapter sources"
	@echo "make new-chapter NAME=ch09_x TITLE='...'  every file a new chapter needs, with two sample exercises"
	@echo "make mutants              mutation testing of every exercise's tests (5-10 min on 2 cores; CH=ch03 for one chapter)"
	@echo "make correct-notebooks    every correct answer of tests/correct_answers/ run inside its whole chapter (3 min on 2 cores; CH=ch08)"
	@echo "make bench                the performance tables, measured side by side (2-9 min on 2 cores; BENCH_QUICK=1: smaller)"
	@echo "make clean                remove .venv, caches and the built site (never the gradebook, submissions or grades)"

# Two stamps, two installs. COURSE_STAMP: the teaching package with what the notebooks and JupyterLab
# need (pyproject.toml's dev extra), all a learner's `make lab` and `make update` install. STAMP: that
# and the grader, a distribution of its own (grader/pyproject.toml, course_grading, docs/grader.md),
# for make install, make test and every instructor's target; a learner's `make grade` installs it on
# first use. Installing also configures nbdime as the diff driver of notebooks in this clone (its
# .git/config only, by absolute path, so it works without activating .venv; see .gitattributes);
# outside a git clone that step is skipped. Merges of notebooks stay git's own: regenerate them with
# `make execute` from the merged text sources instead.
COURSE_STAMP := $(VENV)/.course-installed
$(COURSE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	-git rev-parse --git-dir >/dev/null 2>&1 && \
	  git config diff.jupyternotebook.command "$(CURDIR)/$(BIN)/git-nbdiffdriver diff"
	touch $(COURSE_STAMP)

$(STAMP): $(COURSE_STAMP) grader/pyproject.toml
	$(BIN)/python -m pip install --quiet -e ./grader
	@$(MAKE) --no-print-directory sandbox-tool
	touch $(STAMP)

# The grader runs every submission in a bubblewrap sandbox (grader/course_grading/sandbox.py).
# As root with apt-get (CI), install it; otherwise say how.
sandbox-tool:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing bubblewrap (the grader's sandbox)"; \
	  apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; \
	else echo "NOTE: bubblewrap (bwrap) is missing: make autograde refuses to grade without it and make grade runs unsandboxed."; \
	  echo "      Install it: sudo apt-get install bubblewrap (Debian/Ubuntu), sudo dnf install bubblewrap (Fedora)."; fi

install: $(STAMP)

# The learner's Lab opens their own workspace (WORKSPACE, ignored by git), never notebooks/ (the release,
# which make test compares with a fresh one and make release rewrites): course_utils/workspace.py copies
# in new chapters and merges updated ones, the learner's edits winning, before Lab starts (make update
# does the merge alone). JUPYTER_CONFIG_PATH=lab/learner:lab: JupyterLab's defaults from
# lab/labconfig/default_setting_overrides.json (no news popup, no news or update checks), and for the
# learner no formgrader, create-assignment, course list or assignment list (lab/learner: page_config.json
# and the server extensions; the assignment list needs an exchange, which a learner's own Lab has not:
# on a hub it stays, docs/jupyterhub.md); nbgrader's Validate stays. `make instructor-lab` opens the course root
# with all of nbgrader. LAB_ROOT and LAB_ARGS let the browser tests start this same server on a copy.
#
# The course in Chinese: `make lab LANG=zh_CN` (also release, update and site) uses the Chinese release
# notebooks-zh_CN/ (written from solutions/ and the catalogues in locale/ by `make release LANG=zh_CN`),
# its own workspace (workspace-zh_CN/) and JupyterLab's Chinese interface (lab/zh_CN: the language
# pack's locale). Only LANG=zh_CN given as such selects it: a system's LANG=zh_CN.UTF-8 does not, and
# the value is not passed on as the locale of the programs started (which may not have it).
ifeq ($(LANG),zh_CN)
COURSE_LANG := zh_CN
unexport LANG
endif
RELEASE := notebooks$(if $(COURSE_LANG),-$(COURSE_LANG))
WORKSPACE ?= workspace$(if $(COURSE_LANG),-$(COURSE_LANG))
LAB_CONFIG := $(if $(COURSE_LANG),$(CURDIR)/lab/$(COURSE_LANG):)$(CURDIR)/lab/learner:$(CURDIR)/lab
LAB_ROOT ?= $(WORKSPACE)
LAB_ARGS ?=
update: $(COURSE_STAMP)
	$(BIN)/python -m course_utils.workspace update "$(WORKSPACE)" --release $(RELEASE)

# The kernels inherit the server's environment: COURSE_LANG=zh_CN puts course_utils' own messages (the
# checks' reports, NotImplementedYet) in Chinese (course_utils/messages.py); unset, they are English.
lab: update
	cd "$(LAB_ROOT)" && $(if $(COURSE_LANG),COURSE_LANG=$(COURSE_LANG) )JUPYTER_CONFIG_PATH="$(LAB_CONFIG)" $(CURDIR)/$(BIN)/jupyter lab --ServerApp.root_dir="$(abspath $(LAB_ROOT))" $(JUPYTER_ROOT_FLAG) $(LAB_ARGS)

# The instructor's Lab: nbgrader's formgrader on the course root (INSTRUCTOR_ROOT, the course's own by
# default; the browser tests start it on a throwaway course). lab/instructor: formgrader renders every
# learner's Markdown and output cleaned, under a Content-Security-Policy, math with the pinned MathJax served
# locally, and its Autograde and Generate Feedback buttons running the course's grader (formgrader_guard.py,
# formgrader_api.py).
INSTRUCTOR_ROOT ?= $(CURDIR)
instructor-lab: $(STAMP)
	cd "$(INSTRUCTOR_ROOT)" && JUPYTER_CONFIG_PATH="$(CURDIR)/lab/instructor:$(CURDIR)/lab" $(CURDIR)/$(BIN)/jupyter lab \
	  --ServerApp.root_dir="$(abspath $(INSTRUCTOR_ROOT))" $(JUPYTER_ROOT_FLAG) $(LAB_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check course_utils grader tests tools benchmarks conftest.py nbgrader_config.py solutions site tests_site

# Two workers with one thread each: on a 2-core machine that is faster than one worker with
# two threads (the notebooks' small tensors gain little from a second thread).
TEST_WORKERS ?= 2
test: $(STAMP) lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --durations=25

# The unit tests of course_utils alone, for the edit-and-test loop: every tests/test_*.py except those
# that execute chapters, grade, start a hub or time benchmarks (make test runs them all).
UNIT_TESTS = $(filter-out tests/test_grading% tests/test_hub_rehearsal.py tests/test_probes.py tests/test_bench.py \
	tests/test_sources.py tests/test_sandbox_paths.py tests/test_answers.py tests/test_collect.py tests/test_warm.py,$(wildcard tests/test_*.py))
unit: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(UNIT_TESTS)

# The notebooks once more on an emulated CPU (tools/cpu_profiles.py: ATen's, MKL's and oneDNN's vector
# code limited together), which rounds floats the way another machine does: every experiment claim must
# hold there too. test-portable: the AVX2 laptop (CI runs it after make test); test-cpus: every
# emulated profile in turn (PROFILES="avx2 avx" by default).
PORTABLE_PROFILE ?= avx2
PROFILES ?= avx2 avx
NBVAL_UNDER = vars="$$($(BIN)/python tools/cpu_profiles.py env $(1))" && \
	env -u ATEN_CPU_CAPABILITY -u MKL_ENABLE_INSTRUCTIONS -u ONEDNN_MAX_CPU_ISA $$vars \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope solutions
test-portable: $(STAMP)
	$(call NBVAL_UNDER,$(PORTABLE_PROFILE))

test-cpus: $(STAMP)
	@for p in $(PROFILES); do echo "== the notebooks under the CPU profile $$p"; $(call NBVAL_UNDER,$$p) || exit 1; done

# The course site, in English (site/_build/html) and Chinese (site/_build/html/zh_CN, from the catalogues
# of locale/, with a language switch on every page; built apart, at the same time, then copied in, since
# myst-nb writes its notebook copies next to the output folder): site/prepare.py writes the learner's version of every executed chapter (nbgrader's
# ClearSolutions and ClearHiddenTests, stored outputs kept, nothing executed) with the index and
# the glossary to site/_build/src; Sphinx (site/conf.py, -W: a warning fails the build, a broken
# glossary anchor included) writes site/_build/html. Its packages are the `site` extra, which
# make lab and make test never install. MathJax comes from the npm registry once (checked against
# its sha256) into site/_vendor/, served from _static/mathjax/: the pages fetch nothing outside.
SITE_STAMP := $(VENV)/.site-installed
MATHJAX_VERSION := 3.2.2
MATHJAX_SHA256 := 1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09
MATHJAX := site/_vendor/mathjax
SITE_PORT ?= 8000

$(SITE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,site]'
	touch $(SITE_STAMP)

$(MATHJAX)/.version-$(MATHJAX_VERSION):
	@command -v npm >/dev/null 2>&1 || { echo "make site needs npm to fetch MathJax $(MATHJAX_VERSION) (Debian: apt-get install npm)"; exit 2; }
	rm -rf $(MATHJAX) site/_vendor/.fetch && mkdir -p site/_vendor/.fetch
	cd site/_vendor/.fetch && npm pack --silent mathjax@$(MATHJAX_VERSION) >/dev/null
	echo "$(MATHJAX_SHA256)  site/_vendor/.fetch/mathjax-$(MATHJAX_VERSION).tgz" | sha256sum --check --quiet
	tar -xzf site/_vendor/.fetch/mathjax-$(MATHJAX_VERSION).tgz -C site/_vendor/.fetch
	mkdir -p $(MATHJAX)
	cd site/_vendor/.fetch/package && cp -r LICENSE es5/tex-mml-chtml.js es5/input es5/output es5/ui es5/a11y es5/sre es5/adaptors ../../mathjax/
	rm -rf site/_vendor/.fetch
	touch $@

# The two languages are built side by side (one core each), the Chinese one in site/_build/zh_CN/ so
# that each build has its own notebook copies (myst-nb's jupyter_execute/, next to the output folder).
SITE_EN := $(BIN)/python site/prepare.py && \
	$(BIN)/sphinx-build -q -W --keep-going -b html -d site/_build/doctrees -c site site/_build/src site/_build/html
SITE_ZH := $(BIN)/python site/prepare.py --lang zh_CN && COURSE_SITE_LANG=zh_CN \
	$(BIN)/sphinx-build -q -W --keep-going -b html -d site/_build/zh_CN/doctrees -c site site/_build/src-zh_CN site/_build/zh_CN/html
site: $(SITE_STAMP) $(MATHJAX)/.version-$(MATHJAX_VERSION)
	( $(SITE_ZH) ) & zh=$$!; status=0; ( $(SITE_EN) ) || status=$$?; wait $$zh || status=$$?; exit $$status
	rm -rf site/_build/html/zh_CN && cp -r site/_build/zh_CN/html site/_build/html/zh_CN
	@echo "site: site/_build/html/index.html (make site-serve, or python3 -m http.server -d site/_build/html)"

site-serve:
	@test -f site/_build/html/index.html || { echo "no site yet: run make site first"; exit 2; }
	python3 -m http.server --bind 127.0.0.1 --directory site/_build/html $(SITE_PORT)

# Headless Chromium from Debian's packages, for make test-browser, with a CJK font (the glossary's
# Chinese in the screenshots). As root with apt-get (CI), install them, or bring them up to Debian's
# current release: the package lists are read afresh first (under a second), since a machine's stored
# lists may name an older Chromium than Debian's security updates ship, and the pinned Playwright
# follows the current one (tests_site/test_browser_versions.py). Otherwise say how (the browser tests
# then skip, saying why).
BROWSER_PACKAGES := chromium fonts-wqy-zenhei
browser-tool:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing or updating $(BROWSER_PACKAGES) (the browser tests' browser and a CJK font)"; \
	  apt-get update -q >/dev/null || echo "apt-get update failed: installing from the package lists on this machine"; \
	  apt-get install -y -q $(BROWSER_PACKAGES) >/dev/null; \
	elif [ -x /usr/bin/chromium ] && fc-list :lang=zh 2>/dev/null | grep -q .; then :; \
	else echo "NOTE: /usr/bin/chromium is missing: the browser tests will skip."; \
	  echo "      Install it: sudo apt-get install chromium (Debian/Ubuntu)."; fi

# The site's pages and the learner's path in JupyterLab, in headless Chromium (tests_site/; not
# part of make test, run by CI after it). Screenshots go to site/_build/screenshots/.
test-browser: site browser-tool
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=10 tests_site

# A learner grading their own notebook: the grader (STAMP) is installed on first use, never by make lab.
grade: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make grade NB=notebooks/ch01_seq2seq_rnn/ch01_seq2seq_rnn.ipynb"; exit 2; }
	$(BIN)/python -m course_grading grade "$(NB)"

# A chapter's text source is what people edit; the release reads the paired notebook: sync it first
# (the release itself refuses a notebook whose text differs from its source).
release: $(STAMP) sync
	$(BIN)/python -m course_grading release $(if $(COURSE_LANG),--lang $(COURSE_LANG))

# The translation catalogues (locale/zh_CN/LC_MESSAGES/*.po) brought up to date with the English sources:
# new entries empty, changed ones fuzzy with the old English beside them (docs/translating.md). Then
# `python -m course_utils.i18n check` lists what is left to translate.
translations: $(STAMP)
	$(BIN)/python -m course_utils.i18n update
	$(BIN)/python -m course_utils.messages compile

# The translation gate. make test lets an English edit land before its translation (the Chinese pages
# show the English, marked as awaiting translation, and the run's summary counts the entries); this
# fails on any entry awaiting translation or faulty. CI runs it as a reported, non-blocking stage;
# the release procedure (docs/instructors.md) requires it to pass.
test-translations: $(STAMP)
	$(BIN)/python -m course_utils.i18n check

# Limits per submission: GRADING_NOTEBOOK_S, GRADING_CELL_S, GRADING_MEMORY_MB, GRADING_PROCESSES
# (defaults in grader/course_grading/sandbox.py, Limits); the gradebook is backed up to gradebook-backups/ first.
# JOBS=N grades N submissions at a time, each in its own sandbox and its own copy of the gradebook,
# merged by one writer (grader/course_grading/parallel.py); default: the cores, fewer if memory is short.
autograde: $(STAMP)
	$(BIN)/python -m course_grading autograde $(if $(FORCE),--force) $(if $(JOBS),--jobs $(JOBS)) $(if $(LMS_PENDING),--lms-pending $(LMS_PENDING))

# A class on JupyterHub, rehearsed on this machine (docs/jupyterhub.md): JupyterHub (the `hub`
# extra of pyproject.toml) and its proxy (configurable-http-proxy, pinned in tools/hub, from npm;
# needs Node.js 20 and npm), then tools/hub_rehearsal.py: two students and the instructor through
# the hub and nbgrader's exchange, graded by the course's grader. Neither make lab nor make test
# installs these; tests/test_hub_rehearsal.py runs the rehearsal where they are installed.
HUB_NODE := tools/hub
HUB_STAMP := $(VENV)/.hub-installed
$(HUB_STAMP): $(STAMP) pyproject.toml $(HUB_NODE)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "the hub's proxy needs Node.js (20) and npm: sudo apt-get install nodejs npm"; exit 2; }
	$(BIN)/python -m pip install --quiet -e '.[dev,hub]'
	npm ci --prefix $(HUB_NODE) --no-audit --no-fund --loglevel=error
	touch $(HUB_STAMP)

hub-install: $(HUB_STAMP)

hub-rehearsal: $(HUB_STAMP)
	$(BIN)/python tools/hub_rehearsal.py $(if $(JOBS),--jobs $(JOBS))

# The text sources are what people edit: sync brings each .ipynb's cells up to date from its
# .py and keeps the outputs of unchanged cells; execute then runs them. Commit a re-execution on
# its own, apart from the change to the chapter.
sync: $(STAMP)
	$(BIN)/jupytext --quiet --update --to ipynb $(SOURCES)

# The stored outputs show every run trained, never one reused from the run cache (course_utils/runcache.py).
execute: export COURSE_RUN_CACHE = off
execute: sync
	$(BIN)/python -m course_grading execute $(or $(NB),solutions)

# Mutation testing of the exercises' tests (tools/mutants.py): each solution mutated one small change at a
# time and graded in-process with its visible and hidden tests. Prints mutants / killed / listed
# equivalents per exercise and, on a run of every chapter, rewrites tools/mutants.md (which
# tests/test_mutants.py keeps current). Fails below 90 % killed or on an unlisted survivor. Not part of
# make test. CH=ch03: one chapter; SHOW=1: print each survivor's diff.
mutants: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tools/mutants.py $(CH) $(if $(SHOW),--show)

# A new chapter, scaffolded and wired in (tools/new_chapter.py; CONTRIBUTING.md, "Adding a chapter").
new-chapter: $(STAMP)
	@test -n "$(NAME)" -a -n "$(TITLE)" || { echo 'usage: make new-chapter NAME=ch09_attention_at_inference TITLE="Attention at inference time"'; exit 2; }
	$(BIN)/python tools/new_chapter.py "$(NAME)" "$(TITLE)"

# The correct answers inside their chapters: an experiment that asks more of a learner's function than
# its exercise does stops a correct notebook (tools/correct_in_chapter.py). Not part of make test.
correct-notebooks: $(STAMP)
	$(BIN)/python tools/correct_in_chapter.py $(CH)

# The course's performance claims as tables of ratios measured side by side in one run, each row with
# the machine's own ceiling (matmul peak, copy bandwidth) measured in the same run; one thread and
# all threads, and CUDA where present. Not part of make test. Prints the tables and saves them in
# benchmarks/results/ (latest.md: the full run docs/performance.md quotes). BENCH_QUICK=1: smaller sizes.
bench: $(STAMP)
	$(BIN)/python -m benchmarks $(if $(filter-out 0,$(BENCH_QUICK)),--quick)

# Grading results are the instructor's (gradebook.db holds the hand-graded answers): clean keeps
# gradebook.db, gradebook-backups/, submitted/, autograded/, feedback/ and the grades_*.csv exports.
clean:
	rm -rf $(VENV) .pytest_cache .grading-cache site/_build site/_vendor $(HUB_NODE)/node_modules hub-rehearsal
	find . -name __pycache__ -type d -not -path './.venv/*' -prune -exec rm -rf {} +
