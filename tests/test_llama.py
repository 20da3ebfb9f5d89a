"""The LLaMA-style decoder of chapter 8 (course_utils.llama), and its parity with Hugging Face's Llama.

The parity tests build a ``transformers`` ``LlamaForCausalLM`` from a ``LlamaConfig`` with random
weights (nothing is downloaded: HF_HUB_OFFLINE=1), copy its weights into the course's
``ModernDecoder`` and compare logits (float32, within 1e-5) and greedy generation with the KV cache
(token for token against ``generate``). ``transformers`` is pinned in the ``dev`` extra.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from course_utils import blocks, kvcache, llama, positional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

INSTALL = ("transformers is not installed: the HF parity tests need it. Install the course's dev "
           "extra (make install, or: pip install -e '.[dev]'; it pins transformers==5.24.0).")


def _dev_extra_installed() -> bool:
    """True where the course's dev extra is installed (nbgrader and nbval are in it, not in the core)."""
    import importlib.util
    return all(importlib.util.find_spec(name) is not None for name in ("nbgrader", "nbval"))


def _transformers():
    """``transformers``; skipped only in a non-dev install, a failure where the dev extra is installed."""
    try:
        import transformers
    except ImportError:
        if _dev_extra_installed():   # make install / make test: the pin must be there, never a silent skip
            pytest.fail("the dev extra is installed but transformers is not: " + INSTALL)
        pytest.skip(INSTALL)
    return transformers


def _hf_model(seed=0, n_kv_heads=2, theta=10000.0, vocab=97, std=0.3):
    tf = _transformers()
    cfg = tf.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=120, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=n_kv_heads, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "rope_theta": theta},
                         initializer_range=std, rms_norm_eps=1e-5)
    torch.manual_seed(seed)
    hf = tf.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():     # the norms' gains are ones at init: random ones test that they are copied
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.3)
    return hf


# --- RMSNorm, SwiGLU ---------------------------------------------------------------------------

def test_rms_norm_is_the_formula_and_layernorm_without_centring():
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    w = torch.randn(16, dtype=torch.float64)
    want = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w
    torch.testing.assert_close(blocks.rms_norm(x, w), want)
    centred = x - x.mean(-1, keepdim=True)   # on centred inputs RMSNorm is LayerNorm (no bias)
    torch.testing.assert_close(blocks.rms_norm(centred, eps=1e-5),
                               F.layer_norm(centred, (16,), eps=1e-5))
    assert blocks.RMSNorm(16)(x.float()).dtype == torch.float32


def test_rms_norm_rejects_integers():
    with pytest.raises(TypeError, match="floating-point"):
        blocks.rms_norm(torch.ones(3, dtype=torch.long))


def test_swiglu_is_the_gated_formula_and_its_hidden_size_matches_a_relu_ffn():
    torch.manual_seed(0)
    m = blocks.SwiGLU(32, 48)
    x = torch.randn(2, 7, 32)
    want = m.down_proj.weight @ (F.silu(m.gate_proj.weight @ x[..., None]) * (m.up_proj.weight @ x[..., None]))
    torch.testing.assert_close(m(x), want.squeeze(-1), atol=1e-5, rtol=1e-5)
    assert all(p.dim() == 2 for p in m.parameters()), "SwiGLU has no biases"
    assert blocks.swiglu_hidden(4096, 256) == 11008          # LLaMA-7B's hidden size
    h = blocks.swiglu_hidden(96)
    assert abs(3 * 96 * h - 2 * 96 * 4 * 96) / (2 * 96 * 4 * 96) < 0.05


# --- RoPE --------------------------------------------------------------------------------------

def test_rope_half_layout_is_the_interleaved_rotation_on_permuted_features():
    x = torch.randn(2, 3, 11, 16, dtype=torch.float64)
    p = positional.interleaved_to_half(16)
    assert p.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    half = positional.apply_rope_half(x[..., p].float(), offset=0)
    inter = positional.apply_rope(x, torch.arange(11))[..., p]
    torch.testing.assert_close(half.double(), inter, atol=1e-5, rtol=1e-5)
    # without the permutation the two layouts are different functions
    assert (positional.apply_rope_half(x.float()).double() - positional.apply_rope(x, torch.arange(11))).abs().max() > 0.1


def test_rope_scores_depend_on_the_offset_only_through_relative_positions():
    q, k = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    s0 = positional.apply_rope_half(q) @ positional.apply_rope_half(k).transpose(-2, -1)
    s7 = positional.apply_rope_half(q, 7) @ positional.apply_rope_half(k, 7).transpose(-2, -1)
    torch.testing.assert_close(s0, s7, atol=1e-5, rtol=1e-5)
    # the offset matters for a query against keys rotated at other positions
    assert not torch.allclose(positional.apply_rope_half(q, 7), positional.apply_rope_half(q))


def test_rope_with_offset_equals_the_tail_of_the_whole_sequence():
    x = torch.randn(2, 4, 12, 8)
    torch.testing.assert_close(positional.apply_rope_half(x[:, :, 9:], offset=9), positional.apply_rope_half(x)[:, :, 9:])


@pytest.mark.parametrize("offset", [-1, 1.5, True])
def test_rope_rejects_bad_offsets(offset):
    with pytest.raises(ValueError, match="offset"):
        positional.apply_rope_half(torch.randn(1, 1, 3, 4), offset)


def test_rope_rejects_odd_head_sizes():
    with pytest.raises(ValueError, match="even"):
        positional.apply_rope_half(torch.randn(1, 1, 3, 5))
    with pytest.raises(ValueError, match="even"):
        positional.interleaved_to_half(5)


# --- the decoder and its cache ----------------------------------------------------------------

@pytest.mark.parametrize("positions", ["rope", "learned", "sinusoidal"])
def test_cached_decoding_equals_the_full_forward(positions):
    torch.manual_seed(0)
    cfg = llama.DecoderConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                              positions=positions, max_len=64)
    model = llama.ModernDecoder(cfg).eval()
    tokens = torch.randint(0, 50, (2, 15))
    with torch.no_grad():
        full = model(tokens)
        cache = model.init_state(2)
        parts = [model(tokens[:, :6], cache=cache)] + [model(tokens[:, t:t + 1], cache=cache) for t in range(6, 15)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 15 and cache[0].k.shape == (2, 2, 15, 8), "the cache holds the un-repeated key heads"


def test_the_decoding_protocol_matches_greedy_generate():
    from course_utils import decoding
    torch.manual_seed(0)
    model = llama.ModernDecoder(llama.DecoderConfig(vocab_size=40, d_model=32, n_heads=4, n_kv_heads=1)).eval()
    prompt = torch.randint(0, 40, (3, 5))
    want = llama.greedy_generate(model, prompt, 8)[:, 5:]
    got, _ = decoding.greedy_decode(model, model.init_state(3), 8, eos_id=-1, prompt=prompt)
    assert torch.equal(got, want)


def test_ablation_switches_build_the_chapter_6_parts():
    cfg = llama.DecoderConfig(norm="layer", ffn="relu", positions="learned", n_heads=4, n_kv_heads=None)
    m = llama.ModernDecoder(cfg)
    assert isinstance(m.layers[0].norm1, torch.nn.LayerNorm) and isinstance(m.embed.positions, positional.LearnedPositions)
    assert m.layers[0].self_attn.n_kv_heads == 4 and not m.layers[0].self_attn.rope
    assert cfg.ff_width == 4 * cfg.d_model and cfg.kv_heads == 4
    with pytest.raises(ValueError, match="norm must be one of"):
        llama.DecoderConfig(norm="batch")


def test_bad_tokens_and_caches_say_what_is_wrong():
    m = llama.ModernDecoder(llama.DecoderConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=2))
    with pytest.raises(ValueError, match="int64 ids"):
        m(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="one KVCache per layer"):
        m(torch.zeros(1, 3, dtype=torch.long), cache=kvcache.DecoderCache(1, 1))


# --- parity with Hugging Face's Llama ---------------------------------------------------------

def test_a_missing_transformers_skips_only_outside_the_dev_install(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "transformers", None)        # import transformers -> ImportError
    monkeypatch.setattr(sys.modules[__name__], "_dev_extra_installed", lambda: True)
    with pytest.raises(pytest.fail.Exception, match="dev extra is installed"):
        _transformers()
    monkeypatch.setattr(sys.modules[__name__], "_dev_extra_installed", lambda: False)
    with pytest.raises(pytest.skip.Exception, match="pip install"):
        _transformers()


@pytest.mark.parametrize("n_kv_heads,theta", [(2, 10000.0), (4, 500000.0), (1, 10000.0)])
def test_logits_equal_hugging_face_llama(n_kv_heads, theta):
    hf = _hf_model(n_kv_heads=n_kv_heads, theta=theta)
    ours = llama.from_hf(hf)
    assert ours.cfg.rope_base == theta and ours.cfg.n_kv_heads == n_kv_heads
    tokens = torch.randint(0, 97, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = hf(tokens).logits, ours(tokens)
    err = (got - want).abs().max().item()
    tol = llama.float32_tolerance(ours, tokens)
    assert err <= tol, f"logits differ from transformers' Llama by {err:.2e}, more than float32's rounding here ({tol:.1e})"
    assert tol < 1e-4 * want.abs().max().item(), f"a tolerance of {tol:.1e} would hide a real difference"
    assert want.std() > 0.1, "the logits must not be near zero (the comparison would say nothing)"


def test_the_float32_tolerance_is_rounding_and_catches_a_wrong_model():
    # The tolerance is float32's own rounding on this machine (a few ulps of the largest logit, times
    # the factor), and a model that differs by one norm weight is far outside it.
    hf = _hf_model()
    ours = llama.from_hf(hf)
    tokens = torch.randint(0, 97, (2, 24), generator=torch.Generator().manual_seed(4))
    tol = llama.float32_tolerance(ours, tokens)
    with torch.no_grad():
        scale = ours(tokens).abs().max().item()
        assert 8 * torch.finfo(torch.float32).eps * scale <= tol < 1e-4 * scale
        ours.stack.layers[0].norm1.weight[3] += 1e-2
        err = (ours(tokens) - hf(tokens).logits).abs().max().item()
    assert err > 100 * tol, f"a changed norm weight moved the logits by {err:.1e}, within {100 * tol:.1e}"


def test_greedy_agrees_only_at_a_near_tie():
    want = torch.tensor([[5, 1, 2, 3]])
    got = torch.tensor([[5, 1, 4, 4]])
    logits = torch.zeros(1, 4, 8)
    logits[0, 1, 2], logits[0, 1, 4] = 3.0, 3.0 - 1e-6        # step 2 chose between 2 and 4 by 1e-6
    assert llama.greedy_agrees(want, got, logits, prompt_len=1, tol=1e-5)
    assert not llama.greedy_agrees(want, got, logits, prompt_len=1, tol=1e-7)
    logits[0, 1, 4] = 2.0                                        # a clear choice: a real difference
    assert not llama.greedy_agrees(want, got, logits, prompt_len=1, tol=1e-5)
    assert llama.greedy_agrees(want, want, logits, prompt_len=1, tol=0.0)
    assert not llama.greedy_agrees(want, got[:, :3], logits, prompt_len=1, tol=1.0)


def test_a_wrong_rope_layout_is_caught_by_the_parity_test():
    hf = _hf_model()
    ours = llama.from_hf(hf)
    tokens = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(2))
    p = positional.interleaved_to_half(16)
    with torch.no_grad():
        for layer in ours.layers:   # W_q and W_k rows permuted per head: another model
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                w = proj.weight.view(-1, 16, 64)
                w.copy_(w[:, p].clone())
        err = (ours(tokens) - hf(tokens).logits).abs().max().item()
    assert err > 1e-2


def test_greedy_generation_with_the_cache_equals_hf_generate_token_for_token():
    hf = _hf_model(seed=3)
    ours = llama.from_hf(hf)
    prompt = torch.randint(0, 97, (3, 6), generator=torch.Generator().manual_seed(3))
    want = hf.generate(prompt, max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = llama.greedy_generate(ours, prompt, 40)
    assert got.shape == want.shape == (3, 46)
    with torch.no_grad():
        tol, want_logits = llama.float32_tolerance(ours, want), hf(want).logits
    # Token for token, except after a near tie that float32 rounding may break either way (another CPU).
    assert llama.greedy_agrees(want, got, want_logits, 6, tol), f"first difference at {(got != want).nonzero()[:1].tolist()}"
    assert len(set(got[:, 6:].flatten().tolist())) > 5, "a degenerate generation would test little"


def test_load_rejects_a_state_dict_that_does_not_fit():
    hf = _hf_model()
    ours = llama.ModernDecoder(llama.config_from_hf(hf.config))
    sd = dict(hf.state_dict())
    sd.pop("model.norm.weight")
    with pytest.raises(KeyError, match="norm.weight"):
        llama.load_hf_llama(ours, sd)
    sd = dict(hf.state_dict())
    sd["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="up_proj"):
        llama.load_hf_llama(ours, sd)
    with pytest.raises(KeyError, match="no counterpart"):
        llama.hf_key_to_ours("model.layers.0.self_attn.rotary.weight")


@pytest.mark.parametrize("key", [
    "model.layers.0.self_attn.q_proj.weight_scale", "model.layers.3.mlp.down_proj.qweight",     # FP8, GPTQ
    "model.layers.1.self_attn.k_proj.scales", "model.layers.2.mlp.up_proj.qzeros", "model.layers.0.self_attn.o_proj.g_idx",
    "model.layers.0.self_attn.q_proj.input_scale", "model.layers.0.input_layernorm.bias", "model.layers.5.mlp.gate_proj.bias",
    "model.layers.0.mlp.q_proj.weight", "model.layers.0.self_attn.gate_proj.weight",            # a module under the wrong parent
    "model.layers.0.mlp.input_layernorm.weight", "model.layers.0.self_attn.post_attention_layernorm.weight",
    "model.layers.x.self_attn.q_proj.weight", "model.layers.0.q_proj.weight", "model.layers.0.mlp.weight",
])
def test_hf_key_to_ours_follows_its_table(key):
    """Issue 54: only the table's names map; another leaf, a module under the wrong parent or a layer
    number that is not digits raises instead of giving a made-up name."""
    with pytest.raises(KeyError, match="no counterpart"):
        llama.hf_key_to_ours(key)


def test_hf_key_to_ours_maps_every_row_of_its_table():
    assert llama.hf_key_to_ours("model.layers.12.self_attn.o_proj.weight") == "stack.layers.12.self_attn.out_proj.weight"
    for hf, ours in llama.HF_NAMES.items():
        assert llama.hf_key_to_ours(f"model.layers.3.{hf}.weight") == f"stack.layers.3.{ours}.weight"


def test_a_decoder_built_with_other_parts_uses_them_and_equals_the_course_with_the_same_ones():
    """llama.with_parts: the given rms_norm, swiglu and rope run in every layer (each call counted),
    the decoder with the course's own functions plugged in gives the same logits, and a wrong part
    changes them (a norm without its gain)."""
    from course_utils import blocks, positional
    torch.manual_seed(0)
    model = llama.ModernDecoder(llama.DecoderConfig(vocab_size=32, d_model=16, n_heads=4, n_kv_heads=2,
                                                    n_layers=2, max_len=64)).eval()
    for p in model.parameters():
        p.data.normal_(0, 0.3)
    tokens = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(tokens)
    calls = {"rms": 0, "swiglu": 0, "rope": 0}

    def count(name, fn):
        def wrapped(*args):
            calls[name] += 1
            return fn(*args)
        return wrapped

    swiglu = lambda x, g, u, d: torch.nn.functional.linear(  # noqa: E731
        torch.nn.functional.silu(torch.nn.functional.linear(x, g)) * torch.nn.functional.linear(x, u), d)
    llama.with_parts(model, rms_norm=count("rms", blocks.rms_norm), swiglu=count("swiglu", swiglu),
                     rope=count("rope", positional.apply_rope_half))
    with torch.no_grad():
        got = model(tokens)
    assert calls == {"rms": 2 * 2 + 1, "swiglu": 2, "rope": 2 * 2}, calls
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    llama.with_parts(model, rms_norm=lambda x, w, eps: blocks.rms_norm(x, None, eps))
    with torch.no_grad():
        assert (model(tokens) - want).abs().max() > 1e-2
