"""The benchmark tables: each function measures one of the course's performance claims.

Every function takes the run's :class:`Config` and :class:`Context` (devices, thread settings,
the ceilings measured at the start of the run) and returns a :class:`~benchmarks.harness.Table`
whose rows are ratios measured side by side (:func:`~benchmarks.harness.alternate`), each with
its achieved fraction of a ceiling. The code calls ``course_utils``; it copies nothing from it.
"""

from __future__ import annotations

import copy
import inspect
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import Ceiling, Table, all_threads, alternate, count_flops
from course_utils import (
    attention,
    classify,
    conv_attention,
    cost,
    data,
    families,
    kvcache,
    mla,
    multihead,
    paged,
    positional,
    rnn,
    rnn_attention,
    rolling,
    train,
    transformer,
    vit,
)
from course_utils.lm import DecoderLM, LMConfig

__all__ = ["CONFIGS", "SUITES", "Config", "Context"]

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Config:
    """The sizes of one run. ``full`` is ``make bench``; ``quick`` is ``BENCH_QUICK=1``; ``tiny``
    is what the test runs (it checks that the tables are well-formed, not the numbers)."""

    mode: str
    rounds: int = 5
    budget_s: float = 8.0                  # at most this long per timed group (never fewer than 3 rounds)
    min_sample_s: float = 0.02             # a sample repeats a short call until it lasts this long
    threads: tuple[int, ...] | None = None  # CPU thread counts (default: 1 and all)
    matmul_n: int = 1024
    copy_mib: int = 256
    ceiling_rounds: int = 15
    attn_lengths: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
    attn_heads: int = 2
    attn_d: int = 64
    attn_radius: int = 32
    mha_shape: tuple[int, int, int, int] = (8, 256, 256, 8)          # batch, L, d_model, heads
    kv_variants: tuple[tuple[str, int], ...] = (("MHA", 8), ("GQA-2", 2), ("MQA", 1))
    dec_contexts: tuple[int, ...] = (64, 512, 2048)
    dec_batches: tuple[int, ...] = (1, 16)
    dec_model: tuple[int, int] = (256, 8)                              # d_model, heads
    mla_dims: tuple[int, int, int, int, int] = (256, 8, 32, 128, 16)  # d_model, heads, d_head, d_c, d_rope
    conv_sizes: tuple[int, ...] = (8, 16, 24, 32)
    conv_channels: int = 8
    train_steps: int = 10                  # training steps per round and family
    train_rounds: int = 3
    train_small: bool = False              # tiny models and data (the test)
    grading_chapter: str = "ch03_scaled_dot_product"
    inf_contexts: tuple[int, ...] = (512, 2048, 8192)                 # chapter 9: cached tokens per sequence
    inf_batch: int = 8
    inf_heads: tuple[int, int] = (8, 64)                               # heads, d_head
    inf_block: int = 16                                                # vLLM's block size
    inf_window: int = 256                                              # rolling buffer (Mistral 7B: 4096)
    grading_submissions: int = 2

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


CONFIGS = {
    "full": Config("full"),
    "quick": Config("quick", rounds=3, budget_s=4.0, copy_mib=128, attn_lengths=(128, 512, 2048),
                    dec_contexts=(64, 2048), conv_sizes=(8, 32), train_steps=5, train_rounds=2,
                    grading_submissions=1, inf_contexts=(512, 4096)),
    "tiny": Config("tiny", rounds=2, budget_s=0.2, min_sample_s=0.0, threads=(1,), matmul_n=128, copy_mib=4,
                   ceiling_rounds=2, attn_lengths=(32, 64), attn_heads=2,
                   attn_d=16, attn_radius=4, mha_shape=(2, 16, 32, 4), kv_variants=(("MHA", 4), ("GQA-2", 2), ("MQA", 1)),
                   dec_contexts=(8, 32), dec_batches=(1, 2), dec_model=(32, 4), mla_dims=(32, 4, 8, 16, 4),
                   conv_sizes=(4,), conv_channels=2, train_steps=1, train_rounds=2, train_small=True,
                   grading_submissions=1, inf_contexts=(24, 80), inf_batch=3, inf_heads=(2, 8), inf_block=4,
                   inf_window=16),
}


@dataclass
class Context:
    """What every table needs: the devices, the CPU thread settings, the ceilings measured at the
    start (the tables store achieved rates; :meth:`~benchmarks.harness.Table.finalize` turns them
    into fractions of the run's final ceilings) and where progress lines go."""

    devices: list[str]
    threads: list[int]
    ceilings: dict[tuple[str, int], Ceiling]
    log: Callable[[str], None] = print

    def settings(self):
        """``(device, threads)`` pairs: the CPU at every thread count, CUDA once."""
        for device in self.devices:
            for threads in (self.threads if device == "cpu" else [all_threads()]):
                yield device, threads


def _threads_label(device: str, threads: int) -> str:
    return str(threads) if device == "cpu" else "GPU"


def _gen(device: str, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


# --------------------------------------------------------------------------------------------
# attention: eager, fused, banded window
# --------------------------------------------------------------------------------------------

def _kept_for_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, radius: int) -> dict[str, float]:
    """MiB saved for the backward pass by each attention, inputs ``(batch, heads, L, d)`` requiring grad."""
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    fns = {"eager": lambda: attention.scaled_dot_product_attention(qg, kg, vg),
           "sdpa": lambda: F.scaled_dot_product_attention(qg, kg, vg),
           "window": lambda: attention.sliding_window_attention(qg, kg, vg, radius)}
    return {name: cost.saved_bytes(f) / 2 ** 20 for name, f in fns.items()}


def attention_table(cfg: Config, ctx: Context) -> Table:
    """The course's eager scaled dot-product attention, ``F.scaled_dot_product_attention`` and the
    banded sliding window, forward pass, over the lengths ``cfg.attn_lengths``."""
    h, d, radius = cfg.attn_heads, cfg.attn_d, cfg.attn_radius
    w = 2 * radius + 1
    t = Table("attention", f"Attention: eager vs fused vs banded window (batch 1, {h} heads, d = {d}, window "
              f"{w}, forward)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("L", "L", "d"),
                       ("ms_eager", "eager ms", ".2f"), ("ms_sdpa", "fused ms", ".2f"), ("ms_window", "window ms", ".2f"),
                       ("eager_over_sdpa", "eager ÷ fused", ".2f"), ("eager_over_window", "eager ÷ window", ".2f"),
                       ("peak_eager", "eager % peak", ".1%"), ("peak_sdpa", "fused % peak", ".1%"),
                       ("peak_window", "window % peak", ".1%"),
                       ("mib_eager", "eager MiB kept", ".1f"), ("mib_sdpa", "fused MiB kept", ".1f"),
                       ("mib_window", "window MiB kept", ".1f")],
              ratios=["eager_over_sdpa", "eager_over_window"], ceilings=["peak_eager", "peak_sdpa", "peak_window"],
              ceiling_of=dict.fromkeys(["peak_eager", "peak_sdpa", "peak_window"], "peak_gflops"))
    start = time.perf_counter()
    kept: dict[tuple[str, int], dict[str, float]] = {}
    for device, threads in ctx.settings():
        for L in cfg.attn_lengths:
            g = _gen(device, L)
            q, k, v = (torch.randn(1, h, L, d, device=device, generator=g) for _ in range(3))
            fns = {
                "eager": lambda: attention.scaled_dot_product_attention(q, k, v),
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
                "window": lambda: attention.sliding_window_attention(q, k, v, radius),
            }
            with cost.torch_threads(threads), torch.no_grad():
                tm = alternate(fns, cfg.rounds, budget_s=cfg.budget_s, min_sample_s=cfg.min_sample_s,
                               device=device)
            if (device, L) not in kept:          # exact, the same at every thread count: measured once
                kept[(device, L)] = _kept_for_backward(q, k, v, radius)
            saved = kept[(device, L)]
            full_flops, band_flops = 4 * h * L * L * d, 4 * h * L * min(w, L) * d
            t.rows.append({
                "device": device, "threads": _threads_label(device, threads), "L": L,
                "ms_eager": tm.median("eager") * 1e3, "ms_sdpa": tm.median("sdpa") * 1e3,
                "ms_window": tm.median("window") * 1e3,
                "eager_over_sdpa": tm.ratio("eager", "sdpa"), "eager_over_window": tm.ratio("eager", "window"),
                "peak_eager": full_flops / tm.median("eager") / 1e9, "peak_sdpa": full_flops / tm.median("sdpa") / 1e9,
                "peak_window": band_flops / tm.median("window") / 1e9,
                "mib_eager": saved["eager"], "mib_sdpa": saved["sdpa"], "mib_window": saved["window"],
            })
            ctx.log(f"  attention {device} threads={threads} L={L}: eager/fused {tm.ratio('eager', 'sdpa'):.2f}")
    t.notes = [
        f"% peak: the products' FLOPs ({4}·heads·L²·d for full attention, 4·heads·L·{w}·d for the window) per "
        "second, as a fraction of the fp32 matmul peak measured in this run at the same thread count (the better "
        "of its measurements at the start and at the end of the run).",
        "MiB kept: the bytes saved for the backward pass (course_utils.cost.saved_bytes, "
        "torch.autograd.graph.saved_tensors_hooks; inputs requiring grad); exact, not timed.",
    ]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# MultiHeadAttention (MHA, GQA, MQA) against nn.MultiheadAttention and enable_gqa
# --------------------------------------------------------------------------------------------

def _sdpa_enable_gqa(m: multihead.MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """``m``'s projections around ``F.scaled_dot_product_attention(..., enable_gqa=True)``:
    ``x (batch, L, d_model)`` -> ``(batch, L, d_model)``."""
    q = multihead.split_heads(m.q_proj(x), m.n_heads)
    k = multihead.split_heads(m.k_proj(x), m.n_kv_heads)
    v = multihead.split_heads(m.v_proj(x), m.n_kv_heads)
    return m.out_proj(multihead.merge_heads(F.scaled_dot_product_attention(q, k, v, enable_gqa=True)))


def mha_table(cfg: Config, ctx: Context) -> Table:
    """``multihead.MultiHeadAttention`` with 8, 2 and 1 key/value heads, against
    ``nn.MultiheadAttention`` (MHA only: it has no GQA) and against the same projections around
    ``F.scaled_dot_product_attention(enable_gqa=True)``; forward, and forward + backward."""
    b, L, d, h = cfg.mha_shape
    t = Table("mha", f"MultiHeadAttention vs nn.MultiheadAttention vs SDPA(enable_gqa) (batch {b}, L = {L}, "
              f"d_model = {d}, {h} heads, self-attention, no mask)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("pass", "pass", ""),
                       ("variant", "variant", ""), ("ms_ours", "ours ms", ".3f"), ("ms_torch", "nn.MHA ms", ".3f"),
                       ("ms_gqa", "SDPA(enable_gqa) ms", ".3f"), ("ours_over_torch", "ours ÷ nn.MHA", ".2f"),
                       ("ours_over_gqa", "ours ÷ SDPA(gqa)", ".2f"), ("peak_ours", "ours % peak", ".1%")],
              ratios=["ours_over_torch", "ours_over_gqa"], ceilings=["peak_ours"], ceiling_of={"peak_ours": "peak_gflops"})
    start = time.perf_counter()
    for device, threads in ctx.settings():
        torch.manual_seed(0)
        x = torch.randn(b, L, d, device=device, generator=_gen(device))
        ref = nn.MultiheadAttention(d, h, batch_first=True).to(device)
        mods = {name: multihead.MultiHeadAttention(d, h, g).to(device) for name, g in cfg.kv_variants}
        for pass_ in ("forward", "forward+backward"):
            backward = pass_ != "forward"

            def run(f, backward=backward):
                if not backward:
                    with torch.no_grad():
                        return f()
                f().sum().backward()

            fns = {"torch": lambda: run(lambda: ref(x, x, x, need_weights=False)[0])}
            for name, m in mods.items():
                fns[f"ours {name}"] = lambda m=m: run(lambda: m(x)[0])
                fns[f"gqa {name}"] = lambda m=m: run(lambda: _sdpa_enable_gqa(m, x))
            with cost.torch_threads(threads):
                tm = alternate(fns, cfg.rounds, budget_s=cfg.budget_s, min_sample_s=cfg.min_sample_s,
                               device=device)
            for name, m in mods.items():
                flops = count_flops(lambda m=m: run(lambda: m(x)[0]), backward=backward)
                t.rows.append({
                    "device": device, "threads": _threads_label(device, threads), "pass": pass_, "variant": name,
                    "ms_ours": tm.median(f"ours {name}") * 1e3, "ms_torch": tm.median("torch") * 1e3,
                    "ms_gqa": tm.median(f"gqa {name}") * 1e3,
                    "ours_over_torch": tm.ratio(f"ours {name}", "torch"),
                    "ours_over_gqa": tm.ratio(f"ours {name}", f"gqa {name}"),
                    "peak_ours": flops / tm.median(f"ours {name}") / 1e9,
                })
            ctx.log(f"  mha {device} threads={threads} {pass_}: ours/nn.MHA "
                    + ", ".join(f"{n} {r['ours_over_torch']:.2f}" for n, r in zip(mods, t.rows[-len(mods):])))
    t.notes = ["nn.MHA is nn.MultiheadAttention(batch_first=True, need_weights=False) with 8 heads for every "
               "row (it has no GQA/MQA). SDPA(gqa): the same module's projections around "
               "F.scaled_dot_product_attention(enable_gqa=True); ours uses multihead.grouped_sdpa. "
               "% peak: matmul FLOPs (FlopCounterMode; fused attention counted as its products, x3 with "
               "backward) per second over the measured fp32 peak."]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# decoding with and without the KV cache
# --------------------------------------------------------------------------------------------

def decoding_table(cfg: Config, ctx: Context) -> Table:
    """One decoding step of one ``multihead.MultiHeadAttention`` layer after ``T`` tokens of
    context: without a cache (the whole prefix again, causal), with ``kvcache.KVCache`` (the
    full step: projections, ``KVCache.append`` into the preallocated buffers, and attention), the
    attention over the cache alone, and what concatenating the whole cache at every step (a cache
    without preallocation) would add."""
    d, h = cfg.dec_model
    t = Table("decoding", f"Decoding one token, one attention layer (d_model = {d}, {h} query heads, fp32)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("batch", "batch", "d"),
                       ("context", "context", "d"), ("variant", "variant", ""),
                       ("ms_nocache", "no cache ms", ".3f"), ("ms_step", "cached step ms", ".3f"),
                       ("ms_attn", "attention over cache ms", ".3f"), ("ms_copy", "concatenating the cache ms", ".3f"),
                       ("speedup", "no cache ÷ cached", ".1f"), ("copy_share", "concatenating ÷ step", ".2f"),
                       ("vs_mha", "MHA step ÷ this step", ".2f"), ("cache_mib", "cache MiB read", ".2f"),
                       ("bw_attn", "attention % bandwidth", ".1%"), ("bw_step", "step % bandwidth", ".1%")],
              ratios=["speedup", "copy_share", "vs_mha"], ceilings=["bw_attn", "bw_step"],
              ceiling_of=dict.fromkeys(["bw_attn", "bw_step"], "bandwidth_gbs"))
    start = time.perf_counter()
    for device, threads in ctx.settings():
        torch.manual_seed(0)
        mods = {name: multihead.MultiHeadAttention(d, h, g).to(device).eval() for name, g in cfg.kv_variants}
        for batch in cfg.dec_batches:
            for T in cfg.dec_contexts:
                g = _gen(device, T)
                x = torch.randn(batch, T + 1, d, device=device, generator=g)       # the context and the new token
                fns, sizes = {}, {}
                with torch.no_grad():
                    for name, m in mods.items():
                        k0 = multihead.split_heads(m.k_proj(x[:, :T]), m.n_kv_heads)      # (B, G, T, dh)
                        v0 = multihead.split_heads(m.v_proj(x[:, :T]), m.n_kv_heads)
                        k1 = multihead.split_heads(m.k_proj(x[:, T:]), m.n_kv_heads)      # (B, G, 1, dh)
                        v1 = multihead.split_heads(m.v_proj(x[:, T:]), m.n_kv_heads)
                        kf, vf = torch.cat([k0, k1], 2), torch.cat([v0, v1], 2)
                        q1 = multihead.split_heads(m.q_proj(x[:, T:]), m.n_heads)         # (B, H, 1, dh)
                        mask = attention.causal_mask(1, T + 1, device=device)
                        sizes[name] = kf.nbytes + vf.nbytes
                        fns[f"{name} nocache"] = lambda m=m: m(x, causal=True)
                        cache = kvcache.KVCache(max_len=T + 1)       # preallocated, as a decoder holds it
                        cache.append(k0, v0)
                        fns[f"{name} step"] = lambda m=m, c=cache: m(x[:, T:], cache=c.crop(T), causal=True)
                        fns[f"{name} attn"] = lambda q1=q1, kf=kf, vf=vf, mask=mask: multihead.grouped_sdpa(q1, kf, vf, mask)
                        fns[f"{name} copy"] = lambda k0=k0, v0=v0, k1=k1, v1=v1: (torch.cat([k0, k1], 2),
                                                                                    torch.cat([v0, v1], 2))
                    with cost.torch_threads(threads):
                        tm = alternate(fns, cfg.rounds, budget_s=cfg.budget_s, min_sample_s=cfg.min_sample_s,
                               device=device)
                first = cfg.kv_variants[0][0]
                for name in mods:
                    step, attn = tm.median(f"{name} step"), tm.median(f"{name} attn")
                    t.rows.append({
                        "device": device, "threads": _threads_label(device, threads), "batch": batch, "context": T,
                        "variant": name, "ms_nocache": tm.median(f"{name} nocache") * 1e3, "ms_step": step * 1e3,
                        "ms_attn": attn * 1e3, "ms_copy": tm.median(f"{name} copy") * 1e3,
                        "speedup": tm.ratio(f"{name} nocache", f"{name} step"),
                        "copy_share": tm.ratio(f"{name} copy", f"{name} step"),
                        "vs_mha": tm.ratio(f"{first} step", f"{name} step"),
                        "cache_mib": sizes[name] / 2 ** 20,
                        "bw_attn": sizes[name] / attn / 1e9,
                        # the step writes one position into the buffers; attention reads the whole cache
                        "bw_step": sizes[name] / step / 1e9,
                    })
                ctx.log(f"  decoding {device} threads={threads} batch={batch} T={T}: cache speed-up "
                        + ", ".join(f"{r['variant']} {r['speedup']:.1f}" for r in t.rows[-len(mods):]))
    t.notes = [
        "no cache: the layer over all T + 1 positions with a causal mask (what a model without a cache "
        "recomputes at every step). cached step: the layer on the new token with kvcache.KVCache holding T "
        "positions in buffers preallocated for T + 1 (KVCache(max_len=...), cropped back to T before each "
        "timed call), so the append writes only the new position. 'attention over cache' times "
        "multihead.grouped_sdpa over the T + 1 cached keys and values alone; 'concatenating the cache' times "
        "the two torch.cat that a cache without preallocation would run at every step (read + write of the "
        "whole cache), for comparison.",
        "% bandwidth: attention reads the cache once, cache bytes over its time (attention alone) or over the "
        "whole step's time; both over the copy "
        "bandwidth measured in this run at the same thread count (the better of start and end). Small caches "
        "fit in the processor's caches and can exceed 100 %.",
        "no cache, GQA and MQA: multihead.grouped_sdpa folds each group's r query heads into the query axis; "
        "the causal mask, the same for every head, is repeated r times along that axis (r x L x L), never "
        "expanded to (batch, heads, L, L). Without a cache the fused kernel sees r times longer query rows, "
        "so GQA and MQA do not save time there: their gain is in the cached step.",
    ]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# attention at inference time (chapter 9): paged, rolling
# --------------------------------------------------------------------------------------------

_INF_COLUMNS = [("device", "device", ""), ("threads", "threads", ""), ("context", "context", "d"),
                ("method", "method", ""), ("baseline", "against", ""),
                ("ms_method", "method ms", ".3f"), ("ms_base", "against ms", ".3f"),
                ("speedup", "against ÷ method", ".2f"), ("mib_method", "method MiB reserved", ".2f"),
                ("mib_base", "against MiB reserved", ".2f"), ("mib_used", "MiB of tokens", ".2f"),
                ("max_diff", "max |difference|", ".1e"), ("bw", "method % bandwidth", ".1%")]


def _paged_step(cfg: Config, device: str, T: int) -> dict:
    """One decoding query per sequence for ``cfg.inf_batch`` sequences of lengths drawn in ``[1, T]``:
    keys and values in a ``paged.PagedKVCache`` (gathered through a padded block-table tensor, the
    gather PagedAttention does inside its kernel) against a contiguous cache preallocated to ``T``."""
    (h, d), bs, B = cfg.inf_heads, cfg.inf_block, cfg.inf_batch
    g = _gen("cpu", T)
    lengths = torch.randint(1, T + 1, (B,), generator=g).tolist()
    pages = paged.PagedKVCache(B * -(-T // bs), bs, h, d, device=device)
    dense_k, dense_v = torch.zeros(2, B, h, T, d, device=device)
    for b, n in enumerate(lengths):
        k, v = torch.randn(2, n, h, d, generator=g).to(device)
        pages.add_sequence(b)
        pages.append(b, k, v)
        dense_k[b, :, :n], dense_v[b, :, :n] = k.transpose(0, 1), v.transpose(0, 1)
    n_blocks = max(len(pages.tables[b]) for b in range(B))
    tables = torch.tensor([pages.tables[b] + [0] * (n_blocks - len(pages.tables[b])) for b in range(B)],
                          device=device)                                      # (B, n_blocks)
    q = torch.randn(B, h, 1, d, generator=g).to(device)
    mask_dense = attention.key_padding_mask(torch.tensor(lengths, device=device), T)
    mask_paged = attention.key_padding_mask(torch.tensor(lengths, device=device), n_blocks * bs)

    def through_pages():
        k = pages.k_pool[tables].flatten(1, 2).transpose(1, 2)               # (B, h, n_blocks * bs, d)
        v = pages.v_pool[tables].flatten(1, 2).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_paged)

    def contiguous():
        return F.scaled_dot_product_attention(q, dense_k, dense_v, attn_mask=mask_dense)

    memory = paged.paged_memory(lengths, T, bs)
    per_token = 2 * h * d * 4 / 2 ** 20
    return {"method": f"paged, block {bs}", "baseline": f"contiguous, preallocated to {T}",
            "fns": (through_pages, contiguous), "read": 2 * B * n_blocks * bs * h * d * 4,
            "mib_method": memory["paged"] * per_token, "mib_base": memory["contiguous"] * per_token,
            "mib_used": memory["used"] * per_token}


def _rolling_step(cfg: Config, device: str, T: int) -> dict:
    """One decoding step (write this position, attend) for ``cfg.inf_batch`` sequences folded into the
    heads: a ``rolling.RollingKVCache`` of ``cfg.inf_window`` slots against a full cache of ``T``."""
    (h, d), B, W = cfg.inf_heads, cfg.inf_batch, cfg.inf_window
    g = _gen("cpu", T)
    hb = B * h
    q, k, v = torch.randn(3, hb, 1, d, generator=g).to(device)
    window = rolling.RollingKVCache(W, hb, d, device=device)
    for _ in range(W):
        window.step(q, k, v)
    full_k, full_v = torch.randn(2, hb, T + 1, d, generator=g).to(device)
    full_k[:, -W:], full_v[:, -W:] = k, v       # the last W positions as the window holds them

    def full():
        full_k[:, T], full_v[:, T] = k[:, 0], v[:, 0]
        return F.scaled_dot_product_attention(q, full_k, full_v)

    per_token = 2 * hb * d * 4 / 2 ** 20
    return {"method": f"rolling window {W}", "baseline": f"full cache of {T}",
            "fns": (lambda: window.step(q, k, v), full), "read": window.nbytes(), "check": False,
            "mib_method": window.nbytes() / 2 ** 20, "mib_base": (T + 1) * per_token,
            "mib_used": (T + 1) * per_token}


def inference_table(cfg: Config, ctx: Context) -> Table:
    """Chapter 9's caches, one decoding step each, against the cache they replace: a paged cache
    (``paged.PagedKVCache``) against a contiguous one preallocated to the longest length, and a rolling
    buffer (``rolling.RollingKVCache``) against a full cache; with the memory each reserves for the
    same tokens (latent attention has its own table, ``latent``)."""
    h, d = cfg.inf_heads
    t = Table("inference", f"Attention at inference time, one decoding step (batch {cfg.inf_batch}, {h} heads, "
              f"d_head = {d}, fp32)", columns=list(_INF_COLUMNS), ratios=["speedup"], ceilings=["bw"],
              ceiling_of={"bw": "bandwidth_gbs"})
    start = time.perf_counter()
    for device, threads in ctx.settings():
        for T in cfg.inf_contexts:
            for build in (_paged_step, _rolling_step):
                case = build(cfg, device, T)
                method, base = case["fns"]
                with cost.torch_threads(threads), torch.no_grad():
                    tm = alternate({"method": method, "base": base}, cfg.rounds, budget_s=cfg.budget_s,
                                   min_sample_s=cfg.min_sample_s, device=device)
                    diff = (method() - base()).abs().max().item() if case.get("check", True) else None
                t.rows.append({"device": device, "threads": _threads_label(device, threads), "context": T,
                               "method": case["method"], "baseline": case["baseline"],
                               "ms_method": tm.median("method") * 1e3, "ms_base": tm.median("base") * 1e3,
                               "speedup": tm.ratio("base", "method"), "max_diff": diff,
                               "bw": case["read"] / tm.median("method") / 1e9,
                               **{k: case[k] for k in ("mib_method", "mib_base", "mib_used")}})
            ctx.log(f"  inference {device} threads={threads} T={T}: "
                    + ", ".join(f"{r['method']} {r['speedup']:.2f}" for r in t.rows[-2:]))
    t.notes = [
        "paged: each sequence's length is drawn in [1, context] (seeded); the contiguous cache reserves "
        "context slots per sequence, the paged one whole blocks (paged.paged_memory). Its step gathers the keys "
        "and values through a padded block-table tensor, then runs F.scaled_dot_product_attention with the "
        "lengths' key mask: the gather that PagedAttention does inside its kernel is a copy here, so on a CPU "
        "paging costs time for the memory it saves. max |difference|: paged against contiguous outputs (exact "
        "up to float rounding).",
        "rolling: the step writes one position and attends to the window's slots "
        "(rolling.RollingKVCache.step), against a write and attention over every cached position; batch folded "
        "into the heads. Its memory is the same at every context.",
        "% bandwidth: the cache bytes the method reads over its time, as a fraction of the copy bandwidth "
        "measured in this run at the same thread count.",
    ]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# latent KV (chapter 9): MLA's decoding step, explicit against absorbed
# --------------------------------------------------------------------------------------------

def _mla_explicit_step(h: torch.Tensor, c_kv: torch.Tensor, k_rope: torch.Tensor, W: dict) -> torch.Tensor:
    """One MLA decoding step with every head's keys and values rebuilt from the latent cache
    (``c_kv (B, T, d_c)``, ``k_rope (B, T, d_rope)``; ``h (B, 1, d_model)`` the newest position)."""
    T = c_kv.shape[1]
    q_c = torch.einsum("btm,hmd->bhtd", h, W["W_Q"])
    q_r = positional.apply_rope_half(torch.einsum("btm,hmr->bhtr", h, W["W_QR"]), offset=T - 1)
    k_c = torch.einsum("bsc,hcd->bhsd", c_kv, W["W_UK"])
    v = torch.einsum("bsc,hcd->bhsd", c_kv, W["W_UV"])
    k = torch.cat([k_c, k_rope[:, None].expand(-1, k_c.shape[1], -1, -1)], -1)
    out = F.scaled_dot_product_attention(torch.cat([q_c, q_r], -1), k, v)
    return torch.einsum("bhtd,hdm->btm", out, W["W_O"])


def latent_table(cfg: Config, ctx: Context) -> Table:
    """One decoding step of one MLA layer (``course_utils.mla``) after ``T`` cached tokens: the keys
    and values rebuilt from the latents (``W_UK``, ``W_UV`` applied to the whole cache) against the
    absorbed form (``mla.mla_absorbed``: scores and averages over the latents themselves)."""
    d, h, dh, dc, dr = cfg.mla_dims
    t = Table("latent", f"Decoding one token, one MLA layer (d_model = {d}, {h} heads of {dh}, d_c = {dc}, "
              f"d_rope = {dr}, fp32)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("batch", "batch", "d"),
                       ("context", "context", "d"), ("ms_explicit", "rebuilt K, V ms", ".3f"),
                       ("ms_absorbed", "absorbed ms", ".3f"), ("ratio", "rebuilt ÷ absorbed", ".2f"),
                       ("cache_mib", "latent cache MiB", ".3f"), ("mha_mib", "MHA cache MiB", ".3f"),
                       ("bw_absorbed", "absorbed % bandwidth", ".1%")],
              ratios=["ratio"], ceilings=["bw_absorbed"], ceiling_of={"bw_absorbed": "bandwidth_gbs"})
    start = time.perf_counter()
    for device, threads in ctx.settings():
        W = {k: v.to(device) for k, v in mla.mla_weights(d, h, dh, dc, dr, generator=torch.Generator().manual_seed(0)).items()}
        for batch in cfg.dec_batches:
            for T in cfg.dec_contexts:
                x = torch.randn(batch, T, d, device=device, generator=_gen(device, T))
                with torch.no_grad():
                    c_kv, k_rope = mla.mla_cache(x, W)
                    new = x[:, -1:]
                    fns = {"explicit": lambda: _mla_explicit_step(new, c_kv, k_rope, W),
                           "absorbed": lambda: mla.mla_absorbed(new, c_kv, k_rope, W)}
                    with cost.torch_threads(threads):
                        tm = alternate(fns, cfg.rounds, budget_s=cfg.budget_s, min_sample_s=cfg.min_sample_s,
                                       device=device)
                cache_bytes = c_kv.nbytes + k_rope.nbytes
                t.rows.append({
                    "device": device, "threads": _threads_label(device, threads), "batch": batch, "context": T,
                    "ms_explicit": tm.median("explicit") * 1e3, "ms_absorbed": tm.median("absorbed") * 1e3,
                    "ratio": tm.ratio("explicit", "absorbed"), "cache_mib": cache_bytes / 2 ** 20,
                    "mha_mib": mla.kv_bytes_per_token("mha", h, dh, bytes_per_value=4) * batch * T / 2 ** 20,
                    "bw_absorbed": cache_bytes / tm.median("absorbed") / 1e9,
                })
                ctx.log(f"  latent {device} threads={threads} batch={batch} T={T}: rebuilt / absorbed "
                        f"{t.rows[-1]['ratio']:.2f}")
    t.notes = [
        "rebuilt K, V: every head's keys c_kv W_UK and values c_kv W_UV computed over the whole cache at each "
        "step, then F.scaled_dot_product_attention (the training form used at inference). absorbed: "
        "mla.mla_absorbed, W_UK folded into the query and W_UV into the output projection (its product "
        "W_UV W_O is recomputed inside each timed call), so the step reads only the latents and the RoPE keys.",
        "MHA cache: what a multi-head layer with the same heads would cache (keys and values, fp32): the "
        "latent cache is (d_c + d_rope) / (2 heads d_head) of it.",
    ]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# attention as convolution
# --------------------------------------------------------------------------------------------

def conv_table(cfg: Config, ctx: Context) -> Table:
    """``conv_attention.conv_as_attention`` (9 heads, quadratic positional scores) against ``F.conv2d``
    computing the same 3x3 convolution, with the FLOPs of each."""
    c = cfg.conv_channels
    t = Table("conv", f"Attention as a 3x3 convolution vs F.conv2d ({c} channels in and out, batch 1, forward)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("size", "image", ""),
                       ("L", "L = pixels", "d"), ("ms_att", "attention ms", ".3f"), ("ms_conv", "conv2d ms", ".4f"),
                       ("time_ratio", "attention ÷ conv2d (time)", ".0f"), ("mflop_att", "attention MFLOP", ".2f"),
                       ("mflop_conv", "conv2d MFLOP", ".3f"), ("flop_ratio", "attention ÷ conv2d (FLOPs)", ".0f"),
                       ("peak_att", "attention % peak", ".2%"), ("peak_conv", "conv2d % peak", ".2%")],
              ratios=["time_ratio", "flop_ratio"], ceilings=["peak_att", "peak_conv"],
              ceiling_of=dict.fromkeys(["peak_att", "peak_conv"], "peak_gflops"))
    start = time.perf_counter()
    for device, threads in ctx.settings():
        for n in cfg.conv_sizes:
            g = _gen(device, n)
            image = torch.randn(1, c, n, n, device=device, generator=g)
            weight = torch.randn(c, c, 3, 3, device=device, generator=g)
            fns = {"att": lambda: conv_attention.conv_as_attention(image, weight, 50.0),
                   "conv": lambda: F.conv2d(image, weight, padding=1)}
            with cost.torch_threads(threads), torch.no_grad():
                tm = alternate(fns, cfg.rounds, budget_s=cfg.budget_s, min_sample_s=cfg.min_sample_s,
                               device=device)
                flops = {k: count_flops(f) for k, f in fns.items()}
            t.rows.append({
                "device": device, "threads": _threads_label(device, threads), "size": f"{n}x{n}", "L": n * n,
                "ms_att": tm.median("att") * 1e3, "ms_conv": tm.median("conv") * 1e3,
                "time_ratio": tm.ratio("att", "conv"), "mflop_att": flops["att"] / 1e6,
                "mflop_conv": flops["conv"] / 1e6, "flop_ratio": flops["att"] / flops["conv"],
                "peak_att": flops["att"] / tm.median("att") / 1e9, "peak_conv": flops["conv"] / tm.median("conv") / 1e9,
            })
            ctx.log(f"  conv {device} threads={threads} {n}x{n}: attention/conv2d {tm.ratio('att', 'conv'):.0f}")
    t.notes = ["FLOPs: matrix products and convolutions as counted by torch.utils.flop_counter.FlopCounterMode "
               "(the quadratic scores' einsum, the values, the output projection; softmax and padding not counted)."]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# training throughput of each family
# --------------------------------------------------------------------------------------------

@dataclass
class _Family:
    name: str
    group: str                  # rows are compared with their group's baseline
    loop: str                   # which training loop runs it
    make: Callable[[], nn.Module]
    train: Callable[[nn.Module, int], None]        # (model, steps)
    examples_per_step: int
    tokens_per_step: float | None


def _families(cfg: Config, device: str) -> list[_Family]:
    """The course's model families with their data and training loops."""
    small = cfg.train_small
    batch = 8 if small else 64
    steps = cfg.train_steps
    n_pairs = batch * steps            # one epoch = one round's steps: no reshuffling of a large set per call
    len_train, _, len_vocab = data.length_task(n_train=max(n_pairs, 200), n_test=50)
    len_train = len_train[:n_pairs]
    LV = len(len_vocab)
    tgt_tokens = batch * statistics.mean(len(tgt) + 1 for _, tgt in len_train)    # targets and <eos>
    emb, hid = (8, 16) if small else (32, 64)
    d_model, d_ff = (16, 32) if small else (64, 128)

    def seq2seq(model, steps):
        train.train_seq2seq(model, len_train, len_vocab, len_vocab, train.TrainConfig(steps, lr=3e-3, clip=1.0),
                            batch_size=batch, device=device, progress=False)

    x_img, y_img, _, _ = data.digits()
    n_img = batch * steps
    x_img, y_img = x_img[:n_img].to(device), y_img[:n_img].to(device)

    def images(model, steps):
        classify.train_classifier(model.to(device), x_img[:batch * steps], y_img[:batch * steps],
                                  classify.classifier_config(batch * steps, 1, batch, lr=3e-3), batch_size=batch, seed=0)

    vocab = data.toy_language_vocab()
    V = len(vocab)
    cls_id, mask_id = vocab.stoi[data.CLS], vocab.stoi[data.MASK]
    sentences = data.make_toy_sentences(batch * 4, seed=0)
    mlm_tokens, _ = data.pad_sequences([[cls_id] + vocab.encode(w) for w, _ in sentences])
    lm_tokens, _ = data.pad_sequences([vocab.encode(w, add_sos=True, add_eos=True) for w, _ in sentences])
    mlm_tokens, lm_tokens = mlm_tokens.to(device), lm_tokens.to(device)
    g = torch.Generator(device=device).manual_seed(0)

    def own_loop(loss_of):          # chapter 7 trains these with its own few lines; so does the benchmark
        def run(model, steps):
            model.to(device).train()
            opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
            for i in range(steps):
                loss = loss_of(model, i)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
        return run

    def mlm_loss(model, i):
        rows = mlm_tokens[(torch.arange(batch, device=device) + i * batch) % len(mlm_tokens)]
        inputs, labels = families.mlm_corrupt(rows, mask_id, V, first_regular_id=data.TOY_FIRST_WORD_ID, generator=g)
        return families.mlm_loss(model(inputs), labels)

    def lm_loss(model, i):
        rows = lm_tokens[(torch.arange(batch, device=device) + i * batch) % len(lm_tokens)]
        return train.sequence_loss(model(rows[:, :-1]), rows[:, 1:])   # padding skipped (IGNORE_INDEX)

    lm_targets = float((lm_tokens[:, 1:] != data.PAD_ID).sum()) / len(lm_tokens) * batch
    mlm_len = float((mlm_tokens != data.PAD_ID).sum()) / len(mlm_tokens) * batch
    heads = 2 if small else 4
    img_kw = dict(d_model=d_model, n_heads=heads, n_layers=2, d_ff=d_ff)
    lm_kw = dict(d_model=d_model, n_heads=heads, n_layers=2, max_len=16)
    return [
        _Family("GRU encoder-decoder (ch1)", "reversal", "train.train_seq2seq",
                lambda: rnn.Seq2Seq(LV, LV, emb_dim=emb, hidden=hid), seq2seq, batch, tgt_tokens),
        _Family("Bahdanau attention GRU (ch2)", "reversal", "train.train_seq2seq",
                lambda: rnn_attention.BahdanauSeq2Seq(LV, LV, emb_dim=emb, hidden=hid),
                seq2seq, batch, tgt_tokens),
        _Family("Transformer encoder-decoder (ch6)", "reversal", "train.train_seq2seq",
                lambda: transformer.Seq2SeqTransformer(transformer.Seq2SeqConfig(src_vocab=LV, tgt_vocab=LV, d_model=d_model, n_heads=heads, n_layers=2, d_ff=d_ff)),
                seq2seq, batch, tgt_tokens),
        _Family("ViT (ch7)", "digits", "classify.train_classifier",
                lambda: vit.ViT(vit.ViTConfig(image_size=8, patch=2, **img_kw)), images, batch, None),
        _Family("SmallCNN (ch7)", "digits", "classify.train_classifier",
                lambda: classify.SmallCNN(width=8 if small else 32), images, batch, None),
        _Family("BERT-style encoder, MLM (ch7)", "toy language", "AdamW steps (benchmarks)",
                lambda: families.EncoderOnly(families.EncoderConfig(vocab_size=V, **lm_kw)), own_loop(mlm_loss), batch, mlm_len),
        _Family("GPT-style decoder, LM (ch7)", "toy language", "AdamW steps (benchmarks)",
                lambda: DecoderLM(LMConfig.gpt(V, **lm_kw)), own_loop(lm_loss), batch, lm_targets),
    ]


def training_table(cfg: Config, ctx: Context) -> Table:
    """Training throughput of every model family through the package's training loops, the
    families of one task timed side by side (``cfg.train_steps`` steps per round)."""
    t = Table("training", "Training throughput of each family (batch "
              f"{8 if cfg.train_small else 64}, {cfg.train_steps} steps per round, forward + backward + optimiser)",
              columns=[("device", "device", ""), ("threads", "threads", ""), ("family", "family", ""),
                       ("loop", "training loop", ""), ("examples_s", "examples/s", ".0f"),
                       ("tokens_s", "tokens/s", ".0f"), ("vs", "compared with", ""),
                       ("ratio", "throughput ratio", ".2f"), ("peak", "% peak", ".2%")],
              ratios=["ratio"], ceilings=["peak"], ceiling_of={"peak": "peak_gflops"})
    start = time.perf_counter()
    baselines = {"reversal": "Transformer encoder-decoder (ch6)", "digits": "SmallCNN (ch7)",
                 "toy language": "BERT-style encoder, MLM (ch7)"}
    for device, threads in ctx.settings():
        fams = _families(cfg, device)
        steps = cfg.train_steps
        for group, base in baselines.items():
            members = [f for f in fams if f.group == group]
            models = {}
            for f in members:
                train.set_seed(0)
                models[f.name] = f.make().to(device)
            fns = {f.name: (lambda f=f: f.train(models[f.name], steps)) for f in members}
            with cost.torch_threads(threads):
                flops = {f.name: count_flops(lambda f=f: f.train(copy.deepcopy(models[f.name]), 1), backward=True)
                         for f in members}
                tm = alternate(fns, cfg.train_rounds, warmup=1, budget_s=None, min_rounds=1, min_sample_s=0.0,
                               device=device)
            for f in members:
                sec_per_step = tm.median(f.name) / steps
                t.rows.append({
                    "device": device, "threads": _threads_label(device, threads), "family": f.name, "loop": f.loop,
                    "examples_s": f.examples_per_step / sec_per_step,
                    "tokens_s": None if f.tokens_per_step is None else f.tokens_per_step / sec_per_step,
                    "vs": base, "ratio": tm.ratio(base, f.name),       # time ratio = throughput ratio
                    "peak": flops[f.name] / sec_per_step / 1e9,
                })
            ctx.log(f"  training {device} threads={threads} {group}: "
                    + ", ".join(f"{r['family'].split(' (')[0]} {r['examples_s']:.0f}/s" for r in t.rows[-len(members):]))
    t.notes = [
        "throughput ratio: this family's examples/s over the compared family's, measured round by round "
        "(families of one task alternate). tokens: target tokens with <eos> (seq2seq), predicted tokens (LM), "
        "all input tokens (MLM); '–' for images.",
        "The BERT- and GPT-style models have no training loop in course_utils (chapter 7 writes its few lines "
        "out): the benchmark runs plain AdamW steps on them; issue 18's single loop (train.fit) can replace them.",
        "% peak: matmul FLOPs of one training step (FlopCounterMode, backward included) per second over the "
        "measured fp32 peak (element-wise work and the optimiser are not counted).",
    ]
    t.seconds = time.perf_counter() - start
    return t


# --------------------------------------------------------------------------------------------
# grading
# --------------------------------------------------------------------------------------------

def parallel_grading_jobs() -> bool:
    """Whether the grader can grade a chapter's submissions in parallel: ``grade_chapter`` takes a
    ``jobs`` argument (the ``--jobs`` option of ``python -m course_grading autograde``).

    The hook for the parallel row of :func:`grading_table`: when the grader gains ``jobs=``, the
    row appears without further change here.
    """
    from course_grading import autograde
    return "jobs" in inspect.signature(autograde.grade_chapter).parameters


def _startup_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, course_utils.attention"], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True)
    return time.perf_counter() - start


def grading_table(cfg: Config, ctx: Context) -> Table:
    """Seconds per submission to grade one chapter's solution notebook (``grade_chapter`` in a
    throwaway course, as ``make grade`` and ``make autograde`` do), serial, and in parallel when
    the grader offers it; the floor is the start of a Python process that imports torch."""
    import course_grading as grading
    from course_grading import sandbox

    ch = cfg.grading_chapter
    t = Table("grading", f"Grading: seconds per submission ({ch}, the solution notebook, one thread per kernel)",
              columns=[("mode", "mode", ""), ("threads", "threads per kernel", ""), ("submissions", "submissions", "d"),
                       ("jobs", "jobs", "d"),
                       ("s_per_sub", "s per submission", ".1f"), ("score", "score", ""),
                       ("floor_s", "python + torch start s", ".2f"), ("over_floor", "submission ÷ start", ".1f"),
                       ("speedup", "serial ÷ this", ".2f")],
              ratios=["over_floor", "speedup"], ceilings=["floor_s"])
    start = time.perf_counter()
    nb = grading.chapter_notebook(ch, REPO)
    course = grading.new_course([ch], REPO)                      # the release and gradebook: not timed
    old = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")   # as `make grade` and `make autograde`
    try:
        # the solution's reference run, made once per chapter and cached, is timed on its own row:
        # left inside the first submission it would make serial grading look slower than parallel
        from course_grading import reference
        t0 = time.perf_counter()
        reference.ensure(course, ch, sandbox.Limits.from_env())
        ref_s = time.perf_counter() - t0
        n = cfg.grading_submissions
        per_sub, floors, scores = [], [], []
        for i in range(n):                                        # alternate: a submission, then the floor
            t0 = time.perf_counter()
            res = grading.grade_chapter(course, ch, {f"bench{i}": nb}, force=True, feedback=False)[f"bench{i}"]
            per_sub.append(time.perf_counter() - t0)
            floors.append(_startup_seconds())
            scores.append(f"{res.auto_score:g}/{res.auto_max:g}")
            if res.auto_score != res.auto_max or res.reason:
                t.notes.append(f"WARNING: submission {i} (the solution) got {scores[-1]}: {res.reason or 'points lost'}")
        serial = statistics.median(per_sub)
        floor = statistics.median(floors)
        t.notes.append(f"reference run: the grader runs the solution once per chapter and caches what its "
                       f"checks give (course_grading.reference); that run took {ref_s:.1f} s before the "
                       f"timed submissions ({'made now' if ref_s > 1 else 'already cached by an earlier run'}), "
                       "so no row below includes it.")
        t.rows.append({"mode": "serial", "threads": "1", "submissions": n, "jobs": 1, "s_per_sub": serial,
                       "score": ", ".join(sorted(set(scores))), "floor_s": floor,
                       "over_floor": statistics.median(a / b for a, b in zip(per_sub, floors)), "speedup": 1.0})
        if parallel_grading_jobs():
            jobs = all_threads()
            subs = {f"par{i}": nb for i in range(max(2, jobs) * n)}
            t0 = time.perf_counter()
            res = grading.grade_chapter(course, ch, subs, force=True, feedback=False, jobs=jobs)
            par = (time.perf_counter() - t0) / len(subs)
            floor2 = _startup_seconds()
            t.rows.append({"mode": "parallel", "threads": "1", "submissions": len(subs), "jobs": jobs, "s_per_sub": par,
                           "score": ", ".join(sorted({f"{r.auto_score:g}/{r.auto_max:g}" for r in res.values()})),
                           "floor_s": floor2, "over_floor": par / floor2, "speedup": serial / par})
        else:
            t.notes.append("parallel: the grader has no jobs option yet (grade_chapter(..., jobs=) / autograde "
                           "--jobs); the row appears when it has (benchmarks.suites.parallel_grading_jobs).")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(course, ignore_errors=True)
    iso = sandbox.isolation()
    t.notes.append(f"sandbox: {'bubblewrap' if iso.sandboxed else 'none (' + '; '.join(iso.warnings) + ')'}; "
                   "each submission is one nbgrader process with its own kernel; the training cells shrink "
                   "under NBGRADER_EXECUTION.")
    ctx.log(f"  grading {ch}: {serial:.1f} s per submission (floor {floor:.2f} s)")
    t.seconds = time.perf_counter() - start
    return t


def headline_selectors(cfg: Config) -> list[tuple[str, str, dict, str, str]]:
    """The claims docs/performance.md quotes: ``(claim, table, row filter, column, format)`` (see
    :func:`benchmarks.harness.headline`), at the largest sizes of ``cfg``."""
    L, T, B, n = max(cfg.attn_lengths), max(cfg.dec_contexts), max(cfg.dec_batches), max(cfg.conv_sizes)
    mha, mqa = cfg.kv_variants[0][0], cfg.kv_variants[-1][0]
    tf, gru, bahdanau = "Transformer encoder-decoder (ch6)", "GRU encoder-decoder (ch1)", "Bahdanau attention GRU (ch2)"
    dec = {"batch": B, "context": T}
    Ti = max(cfg.inf_contexts)
    paged = {"context": Ti, "method": f"paged, block {cfg.inf_block}"}
    return [
        (f"ch3 attention, L = {L}: eager ÷ fused (time)", "attention", {"L": L}, "eager_over_sdpa", ".2f"),
        (f"ch3 attention, L = {L}: eager ÷ banded window (time)", "attention", {"L": L}, "eager_over_window", ".2f"),
        (f"ch3 attention, L = {L}: fused, % of matmul peak", "attention", {"L": L}, "peak_sdpa", ".1%"),
        (f"ch3 attention, L = {L}: MiB kept for backward, eager", "attention", {"L": L}, "mib_eager", ".1f"),
        (f"ch3 attention, L = {L}: MiB kept for backward, fused", "attention", {"L": L}, "mib_sdpa", ".1f"),
        ("ch4 MultiHeadAttention ÷ nn.MultiheadAttention, forward", "mha", {"pass": "forward", "variant": mha},
         "ours_over_torch", ".2f"),
        ("ch4 MultiHeadAttention ÷ nn.MultiheadAttention, forward + backward", "mha",
         {"pass": "forward+backward", "variant": mha}, "ours_over_torch", ".2f"),
        (f"ch4 {mqa}: ours ÷ SDPA(enable_gqa), forward", "mha", {"pass": "forward", "variant": mqa},
         "ours_over_gqa", ".2f"),
        (f"ch4 decoding, batch 1, context {T}: no cache ÷ KV cache ({mha})", "decoding",
         {"batch": 1, "context": T, "variant": mha}, "speedup", ".1f"),
        (f"ch4 decoding, batch {B}, context {T}: {mha} step ÷ {mqa} step", "decoding", {**dec, "variant": mqa},
         "vs_mha", ".2f"),
        (f"ch4 decoding, batch {B}, context {T}: concatenating the cache ÷ whole preallocated step ({mha})", "decoding",
         {**dec, "variant": mha}, "copy_share", ".2f"),
        (f"ch4 decoding, batch {B}, context {T}: attention over the cache, % of bandwidth ({mha})", "decoding",
         {**dec, "variant": mha}, "bw_attn", ".1%"),
        (f"ch5 attention as a 3x3 convolution, {n}x{n} image: ÷ conv2d (time)", "conv", {"size": f"{n}x{n}"},
         "time_ratio", ".0f"),
        (f"ch5 attention as a 3x3 convolution, {n}x{n} image: ÷ conv2d (FLOPs)", "conv", {"size": f"{n}x{n}"},
         "flop_ratio", ".0f"),
        ("ch6 training, examples/s: ch1 GRU ÷ Transformer", "training", {"family": gru}, "ratio", ".2f"),
        ("ch6 training, examples/s: ch2 attention GRU ÷ Transformer", "training", {"family": bahdanau}, "ratio", ".2f"),
        ("ch6 training: Transformer, % of matmul peak", "training", {"family": tf}, "peak", ".2%"),
        ("ch7 training, examples/s: ViT ÷ SmallCNN", "training", {"family": "ViT (ch7)"}, "ratio", ".2f"),
        ("ch7 training, examples/s: GPT-style LM ÷ BERT-style MLM", "training",
         {"family": "GPT-style decoder, LM (ch7)"}, "ratio", ".2f"),
        (f"ch9 decoding, batch {cfg.inf_batch}, context {Ti}: contiguous cache ÷ paged, block {cfg.inf_block} (time)",
         "inference", paged, "speedup", ".2f"),
        (f"ch9 decoding, batch {cfg.inf_batch}, context {Ti}: MiB reserved, paged, block {cfg.inf_block}", "inference",
         paged, "mib_method", ".1f"),
        (f"ch9 decoding, batch {cfg.inf_batch}, context {Ti}: MiB reserved, contiguous cache", "inference", paged,
         "mib_base", ".1f"),
        (f"ch9 decoding, batch {cfg.inf_batch}, context {Ti}: full cache ÷ rolling window {cfg.inf_window} (time)",
         "inference", {"context": Ti, "method": f"rolling window {cfg.inf_window}"}, "speedup", ".2f"),
        (f"ch9 MLA decoding, batch {B}, context {T}: keys and values rebuilt ÷ absorbed (time)", "latent", dec,
         "ratio", ".2f"),
        (f"grading {cfg.grading_chapter}: seconds per submission (serial)", "grading", {"mode": "serial"},
         "s_per_sub", ".1f"),
    ]


SUITES: dict[str, Callable[[Config, Context], Table]] = {
    "attention": attention_table, "mha": mha_table, "decoding": decoding_table, "conv": conv_table,
    "training": training_table, "inference": inference_table, "latent": latent_table, "grading": grading_table,
}
