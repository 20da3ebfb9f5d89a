"""pytest hooks: notebook time budgets, and grouping for parallel runs.

Each notebook that nbval executes (solutions/*/*.ipynb) has a time budget: the cell during
which a notebook's running time crosses NOTEBOOK_BUDGET_S fails with a message that says so.
The course aims at about 90 s per notebook on a 2-core CPU (chapter 6: 120 s); the budget
leaves room for a slower or busier machine. A summary of every notebook's time is printed at
the end of the run.

`make test` runs pytest on two workers (pytest-xdist, ``--dist loadscope``, one thread each).
Scopes keep together what must run in one process: a notebook's cells share one kernel (their
scope is the notebook), and the tests of a module share its module-scoped fixtures (their scope is
the module). ``tests/test_grading.py`` is split further, one scope per chapter (``scope_of``), so
that the chapters' graded classes run on both workers, and the costliest scopes go out first
(``heaviest_first``).
Each worker enforces the budgets of the notebooks it runs; the summary is made from the reports
that reach the main process.

A run of pytest gets a fresh folder for the training runs chapters share (``COURSE_RUN_CACHE``,
``course_utils.runcache``), which its workers and their kernels inherit: within the run, a chapter
reuses a length-task baseline that another chapter finished training before it asked (xdist sends
chapter 6 first, most cells first, and chapter 2 then loads its runs; a run two notebooks make at the
same moment is trained twice), but nothing comes from an earlier run.
"""
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))
import cpu_profiles  # noqa: E402

# Under pytest a claim that does not hold fails its cell (the learner's own kernel only prints a
# notice: course_utils/claims.py); the kernels nbval starts inherit this environment.
os.environ.setdefault("COURSE_CLAIMS", "strict")

NOTEBOOK_BUDGET_S = float(os.environ.get("NOTEBOOK_BUDGET_S", 150))
# Chapter 6 retrains the chapter 1-2 baselines beside its Transformer: its target is 120 s
# instead of 90 s (the course's design targets), so its guard is scaled by the same 120/90.
_BUDGET_SCALE = {"ch06_transformer": 120 / 90}


# `make test-portable` and `make test-cpus` run the notebooks under an emulated CPU (tools/cpu_profiles.py),
# slower than the native one (the avx profile has ATen's portable kernel, without vector code).
_PORTABLE_SCALE = cpu_profiles.SLOWDOWN.get(cpu_profiles.current() or "avx", 2.0)


def _budget(nb: str) -> float:
    scale = next((v for k, v in _BUDGET_SCALE.items() if k in nb), 1.0)
    return NOTEBOOK_BUDGET_S * scale * _PORTABLE_SCALE
_elapsed: dict[str, float] = defaultdict(float)   # per process: enforces the budget
_totals: dict[str, float] = defaultdict(float)    # in the process that reports: the summary
_over: set[str] = set()


# Test modules whose module-scoped fixture is parametrized and costly: each parameter is a scope of its
# own (tests/test_grading.py grades a class per chapter, minutes each: the chapters go to both workers).
SCOPE_PER_PARAMETER = ("tests/test_grading.py",)


def scope_of(nodeid: str) -> str:
    """The xdist scope of a test: its file (a notebook's cells share one kernel, a module's tests its
    module-scoped fixtures), and for the modules of SCOPE_PER_PARAMETER its parameter too."""
    path = nodeid.split("::")[0]
    if path in SCOPE_PER_PARAMETER and nodeid.endswith("]") and "[" in nodeid:
        return f"{path}[{nodeid.rsplit('[', 1)[1]}"
    return path


# The costliest scopes, most costly first. xdist queues scopes by their number of tests, which puts a
# graded class (a dozen tests, two minutes of grading) behind the unit-test modules: a worker then
# starts one late and the other waits for it. Longest first, the small modules fill the end.
HEAVY_FIRST = ("tests/test_grading_hostile.py", "tests/test_grading.py", "tests/test_grading_class.py",
               "solutions/", "tests/test_answers.py", "tests/test_hub_rehearsal.py")


def heaviest_first(scopes: list[str]) -> list[str]:
    """``scopes`` in the order the workers get them: by the first prefix of HEAVY_FIRST each starts
    with, the rest after them; the order given within each group."""
    def rank(scope: str) -> int:
        return next((i for i, prefix in enumerate(HEAVY_FIRST) if scope.startswith(prefix)), len(HEAVY_FIRST))
    return sorted(scopes, key=rank)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not getattr(self, "_ordered", False):   # once, before the first unit goes out
                self._ordered = True
                for scope in heaviest_first(list(self.workqueue)):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return ByScope(config, log)


def pytest_configure(config):
    if not hasattr(config, "workerinput") and os.environ.get("COURSE_RUN_CACHE", "").lower() != "off":
        # the main process, before any worker starts
        config._run_cache = tempfile.mkdtemp(prefix="course-runs-")
        os.environ["COURSE_RUN_CACHE"] = config._run_cache


def pytest_unconfigure(config):
    if getattr(config, "_run_cache", None):
        shutil.rmtree(config._run_cache, ignore_errors=True)


def _is_notebook_cell(item) -> bool:
    return str(getattr(item, "fspath", "")).endswith(".ipynb")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not _is_notebook_cell(item):
        return
    report = outcome.get_result()
    nb = os.path.relpath(str(item.fspath))
    _elapsed[nb] += call.duration
    if report.when == "call" and _elapsed[nb] > _budget(nb) and nb not in _over:
        _over.add(nb)
        report.outcome = "failed"
        report.longrepr = (f"{nb} has run for {_elapsed[nb]:.0f} s, over its budget of "
                           f"{_budget(nb):.0f} s: shrink its experiments")


_ran_i18n = []


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path == "tests/test_i18n.py" and not _ran_i18n:
        _ran_i18n.append(path)
    if path.endswith(".ipynb"):
        _totals[path] += report.duration
        if "over its budget" in str(report.longrepr or ""):
            _over.add(path)


def _awaiting_translation() -> dict[str, int]:
    """Entries of each catalogue that await a translation (new or fuzzy): make test lets them land."""
    from course_utils.i18n import catalogue, sources

    root = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for lang in catalogue.LANGUAGES:
        for domain in sources.domains(Path(root)):
            path = catalogue.po_path(Path(root), lang, domain)
            if path.is_file():
                n = sum(1 for m in catalogue.read(path) if m.id and (m.fuzzy or not m.string))
                if n:
                    out[f"{lang}/{domain}"] = n
    return out


def pytest_terminal_summary(terminalreporter):
    if _ran_i18n:
        left = _awaiting_translation()
        terminalreporter.section("translations")
        terminalreporter.write_line(
            f"{sum(left.values())} entries await translation (the translated pages show their English, marked)"
            + (": " + ", ".join(f"{k} {v}" for k, v in left.items()) + "; make test-translations lists them"
               if left else ""))
    if _totals:
        terminalreporter.section("notebook execution times (nbval)")
        for nb, sec in sorted(_totals.items()):
            flag = "  OVER BUDGET" if nb in _over else ""
            terminalreporter.write_line(f"{sec:7.1f} s  {nb}{flag}")
