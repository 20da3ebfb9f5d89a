"""`make bench`: the course's performance claims as ratio tables, measured in one run.

:mod:`benchmarks.harness` times implementations side by side and measures the machine's
ceilings; :mod:`benchmarks.suites` holds the tables; ``python -m benchmarks`` runs them and
saves the results under ``benchmarks/results/``.
"""
