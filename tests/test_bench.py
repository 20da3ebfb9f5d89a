"""The benchmark harness (`make bench`), run in its tiny configuration: are its tables well-formed?

Nothing here is about speed: the tiny run checks that every table has rows, that every ratio is
a finite positive number measured in the run, that every row carries its ceiling, and that the
results are written as JSON and Markdown with the machine's description. The timing helper is
checked for what it promises (round-robin order, paired ratios), with stand-in functions.
"""
import inspect
import json
import math

import pytest

from benchmarks import harness, suites
from benchmarks.__main__ import add_gpu_columns, main, run


@pytest.fixture(scope="module")
def tiny_run():
    lines = []
    tables, machine, ceilings, cfg = run("tiny", skip=["grading"], cpu_only=True, log=lines.append)
    return tables, machine, ceilings, cfg, lines


def test_every_table_is_well_formed(tiny_run):
    tables, _, _, _, _ = tiny_run
    assert [t.key for t in tables] == [k for k in suites.SUITES if k != "grading"], \
        f"the tiny run left out tables: {[t.key for t in tables]}"
    problems = [p for t in tables for p in t.problems()]
    assert not problems, "ill-formed tables:\n" + "\n".join(problems)


def test_every_row_has_its_ceiling_and_its_setting(tiny_run):
    tables, _, ceilings, cfg, _ = tiny_run
    assert set(ceilings) == {("cpu", n) for n in cfg.threads}, f"ceilings measured for {sorted(ceilings)}"
    for c in ceilings.values():
        assert math.isfinite(c.peak_gflops) and c.peak_gflops > 0, f"peak {c.peak_gflops}"
        assert math.isfinite(c.bandwidth_gbs) and c.bandwidth_gbs > 0, f"bandwidth {c.bandwidth_gbs}"
    for t in tables:
        assert t.ceilings, f"{t.key} has no ceiling column"
        for row in t.rows:
            assert row["device"] == "cpu" and row["threads"] in {str(n) for n in cfg.threads}, \
                f"{t.key}: a row without its device and thread count: {row}"


def test_tables_measure_what_they_say(tiny_run):
    tables = {t.key: t for t in tiny_run[0]}
    cfg = tiny_run[3]
    att = tables["attention"]
    assert [r["L"] for r in att.rows] == list(cfg.attn_lengths), "one attention row per length"
    for r in att.rows:      # exact, not timed: the eager version keeps (at least) the L x L weights of each head
        assert r["mib_eager"] * 2 ** 20 >= cfg.attn_heads * r["L"] ** 2 * 4 > 0, f"saved memory at L = {r['L']}: {r}"
        assert r["mib_window"] > 0 and r["mib_sdpa"] > 0, r
    dec = tables["decoding"]
    want = len(cfg.dec_batches) * len(cfg.dec_contexts) * len(cfg.kv_variants)
    assert len(dec.rows) == want, f"decoding: {len(dec.rows)} rows, expected {want}"
    for r in dec.rows:
        if r["variant"] == cfg.kv_variants[0][0]:
            assert r["vs_mha"] == pytest.approx(1.0), "MHA against itself must be 1"
    mib = {(r["batch"], r["context"], r["variant"]): r["cache_mib"] for r in dec.rows}
    b, T = cfg.dec_batches[-1], cfg.dec_contexts[-1]
    heads = dict(cfg.kv_variants)
    ratio = mib[(b, T, "MHA")] / mib[(b, T, "MQA")]
    assert ratio == pytest.approx(heads["MHA"] / heads["MQA"]), f"MHA's cache is {ratio} x MQA's"
    conv = tables["conv"]
    assert all(r["flop_ratio"] > 1 for r in conv.rows), "attention as convolution must count more FLOPs"
    training = tables["training"]
    assert len({r["family"] for r in training.rows}) == 7, "every model family gets a row"


def test_inference_table_measures_what_it_says(tiny_run):
    rows, cfg = {(r["context"], r["method"].split()[0]): r for r in next(
        t for t in tiny_run[0] if t.key == "inference").rows}, tiny_run[3]
    assert len(rows) == 2 * len(cfg.inf_contexts), f"one paged and one rolling row per context: {sorted(rows)}"
    for T in cfg.inf_contexts:
        p, r = rows[(T, "paged,")], rows[(T, "rolling")]
        assert p["max_diff"] < 1e-5, f"attention through the block tables must equal the contiguous cache's: {p}"
        assert p["mib_used"] <= p["mib_method"] < p["mib_used"] + cfg.inf_batch * cfg.inf_block * 2 * 4 * \
            cfg.inf_heads[0] * cfg.inf_heads[1] / 2 ** 20, f"pages waste at most a block per sequence: {p}"
        assert p["mib_method"] <= p["mib_base"], f"pages reserve no more than contiguous preallocation: {p}"
        assert r["mib_method"] == rows[(cfg.inf_contexts[0], "rolling")]["mib_method"], "the window's memory is flat"


def test_problems_catch_a_bad_row():
    t = harness.Table("x", "x", columns=[("a", "a", ""), ("r", "r", ""), ("c", "c", "")], ratios=["r"], ceilings=["c"],
                      rows=[{"a": 1, "r": 2.0, "c": 0.5}])
    assert t.problems() == []
    t.rows.append({"a": 2, "r": float("nan"), "c": 0.5})
    t.rows.append({"a": 3, "r": 1.0, "c": None})
    t.rows.append({"a": 4, "r": 1.0})
    found = "\n".join(t.problems())
    assert "row 1: ratio 'r'" in found and "row 2: ceiling 'c'" in found and "row 3: no value for ['c']" in found, found
    assert harness.Table("y", "y", columns=[("a", "a", "")], ratios=[], ceilings=[]).problems(), \
        "a table without rows or ceiling must be ill-formed"


def test_alternate_rotates_and_pairs():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    tm = harness.alternate(fns, rounds=3, warmup=1, min_sample_s=0.0)
    assert calls[3:] == list("abc" "bca" "cab"), f"rounds not rotated: {calls}"
    assert tm.rounds == 3 and set(tm.seconds) == set("abc")
    paired = harness.Timing({"x": [2.0, 4.0, 8.0], "y": [1.0, 4.0, 2.0]})
    assert paired.ratio("x", "y") == 2.0 and paired.median("x") == 4.0


def test_gpu_column_compares_matching_rows():
    t = harness.Table("mha", "m", columns=[("device", "", ""), ("threads", "", ""), ("pass", "", ""),
                                           ("variant", "", ""), ("ms_ours", "", "")], ratios=[], ceilings=[],
                      rows=[{"device": "cpu", "threads": "2", "pass": "f", "variant": "MHA", "ms_ours": 8.0},
                            {"device": "cuda", "threads": "GPU", "pass": "f", "variant": "MHA", "ms_ours": 2.0}])
    add_gpu_columns([t], 2)
    assert [r["cpu_over_gpu"] for r in t.rows] == [None, 4.0]


def test_results_are_saved_with_the_machine(tmp_path, capsys):
    assert main(["--mode", "tiny", "--only", "attention,conv", "--cpu-only", "--out", str(tmp_path)]) == 0
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert len(saved) == 2 and saved[0].endswith("-tiny.json") and saved[1].endswith("-tiny.md"), saved
    data = json.loads((tmp_path / saved[0]).read_text())
    for key in ("CPU", "cores available", "torch", "ATen CPU capability", "thread settings", "date (UTC)", "CUDA"):
        assert key in data["machine"], f"the machine's description lacks {key!r}"
    assert [t["key"] for t in data["tables"]] == ["attention", "conv"]
    md = (tmp_path / saved[1]).read_text()
    assert "## The machine's ceilings" in md and "## Attention" in md and "eager ÷ fused" in md, md[:400]
    assert "| eager ms |" in capsys.readouterr().out, "the tables are printed too"


def test_parallel_grading_hook_reads_the_grader():
    from course_grading import autograde
    assert suites.parallel_grading_jobs() == ("jobs" in inspect.signature(autograde.grade_chapter).parameters)


def test_readme_gets_the_headline_between_its_markers(tmp_path):
    from benchmarks.__main__ import END, START, update_readme
    machine = {"CPU": "Some CPU", "cores available": 2, "torch": "2.13.0", "ATen CPU capability": "AVX2",
               "date (UTC)": "2026-01-01 00:00", "load average at start": "0.10 0.20 0.30", "CUDA": "CUDA: none"}
    results = tmp_path / "latest.json"
    results.write_text(json.dumps({"machine": machine, "headline": "| claim | 1 thread |\n|---|---|\n| x | 2.00 |\n"}))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\nold table\n{END}\nafter\n")
    update_readme(readme, results)
    text = readme.read_text()
    assert "old table" not in text and "| x | 2.00 |" in text and "Some CPU" in text, text
    assert text.startswith("intro\n") and text.endswith(f"{END}\nafter\n"), text
    update_readme(readme, results)
    assert readme.read_text() == text, "updating twice must change nothing"
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no .* block"):
        update_readme(readme, results)


def test_finalize_divides_rates_by_the_best_ceiling():
    start = {("cpu", 1): harness.Ceiling("cpu", 1, 50.0, 10.0, 8, 1)}
    end = {("cpu", 1): harness.Ceiling("cpu", 1, 100.0, 5.0, 8, 1)}
    best = harness.best_ceilings(start, end)
    assert (best[("cpu", 1)].peak_gflops, best[("cpu", 1)].bandwidth_gbs) == (100.0, 10.0)
    t = harness.Table("x", "x", columns=[("device", "", ""), ("threads", "", ""), ("g", "", ""), ("b", "", "")],
                      ratios=[], ceilings=["g", "b"], ceiling_of={"g": "peak_gflops", "b": "bandwidth_gbs"},
                      rows=[{"device": "cpu", "threads": "1", "g": 25.0, "b": 5.0}])
    assert any("finalize" in p for p in t.problems()), "rates must not pass for fractions"
    t.finalize(best)
    assert (t.rows[0]["g"], t.rows[0]["b"], t.rows[0]["g_achieved"]) == (0.25, 0.5, 25.0)
    assert t.problems() == []
    with pytest.raises(RuntimeError, match="already"):
        t.finalize(best)


def test_more_threads_never_lower_the_ceiling():
    measured = {("cpu", 1): harness.Ceiling("cpu", 1, 100.0, 30.0, 8, 1),
                ("cpu", 2): harness.Ceiling("cpu", 2, 60.0, 40.0, 8, 1)}
    best = harness.best_ceilings(measured)
    assert (best[("cpu", 2)].peak_gflops, best[("cpu", 2)].bandwidth_gbs) == (100.0, 40.0)
    assert (best[("cpu", 1)].peak_gflops, best[("cpu", 1)].bandwidth_gbs) == (100.0, 30.0)


def test_grading_table_serial_and_the_parallel_row_when_the_grader_takes_jobs(monkeypatch, tmp_path):
    """The grading table with the grader replaced by a stand-in: serial only, then with a
    ``jobs`` argument (the hook for the grader's coming --jobs option) a parallel row too."""
    from types import SimpleNamespace

    import course_grading as grading
    from course_grading import autograde, reference

    calls = []

    def serial_only(course, chapter, subs, force=False, feedback=True):
        calls.append((len(subs), 1))
        return {s: SimpleNamespace(auto_score=20.0, auto_max=20.0, reason="") for s in subs}

    def with_jobs(course, chapter, subs, force=False, feedback=True, jobs=1):
        calls.append((len(subs), jobs))
        return {s: SimpleNamespace(auto_score=20.0, auto_max=20.0, reason="") for s in subs}

    monkeypatch.setattr(grading, "new_course", lambda chapters, root: tmp_path / "course", raising=False)
    monkeypatch.setattr(suites, "_startup_seconds", lambda: 0.5)
    ensured = []
    monkeypatch.setattr(reference, "ensure", lambda course, ch, limits: ensured.append(ch))
    ctx = suites.Context(["cpu"], [1], {}, log=lambda s: None)
    cfg = suites.CONFIGS["tiny"]
    for fake, rows in ((serial_only, 1), (with_jobs, 2)):
        monkeypatch.setattr(grading, "grade_chapter", fake, raising=False)
        monkeypatch.setattr(autograde, "grade_chapter", fake)
        t = suites.grading_table(cfg, ctx)
        assert [r["mode"] for r in t.rows] == ["serial", "parallel"][:rows], t.rows
        assert t.problems() == [], t.problems()
        assert all(r["score"] == "20/20" for r in t.rows)
    assert len(ensured) == 2, "the reference run is made once per table, before the timed submissions"
    assert any("reference run" in n for n in t.notes), t.notes
    jobs = harness.all_threads()
    assert calls[-1] == (max(2, jobs) * cfg.grading_submissions, jobs), f"the parallel call: {calls}"


def test_latent_table_rows_and_its_explicit_step(tiny_run):
    """One row per batch and context; the latent cache is (d_c + d_rope) / (2 heads d_head) of MHA's
    (exact, not timed); the rebuilt-keys step it times equals explicit MLA's last row."""
    tables, cfg = {t.key: t for t in tiny_run[0]}, tiny_run[3]
    lat = tables["latent"]
    assert len(lat.rows) == len(cfg.dec_batches) * len(cfg.dec_contexts), f"latent: {len(lat.rows)} rows"
    d, h, dh, dc, dr = cfg.mla_dims
    for r in lat.rows:
        assert r["cache_mib"] / r["mha_mib"] == pytest.approx((dc + dr) / (2 * h * dh)), r
    import torch

    from course_utils import mla
    W = mla.mla_weights(d, h, dh, dc, dr, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = torch.randn(2, 7, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    c_kv, k_rope = mla.mla_cache(x, W)
    torch.testing.assert_close(suites._mla_explicit_step(x[:, -1:], c_kv, k_rope, W), mla.mla_explicit(x, W)[:, -1:])
