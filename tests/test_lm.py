"""The one decoder-only LM (issue 34): ``lm.DecoderLM(LMConfig)``, its two presets, its one cache
object (``kvcache.DecoderCache``), prefill in every decoding helper, RoPE angles once per forward.

The seeded numbers below were computed once with the two classes this one replaced
(chapter 7's GPT constructor, now ``DecoderLM(LMConfig.gpt(...))``, and ``llama.ModernDecoder`` at commit ec4e212): the same seed must
give the same parameters, in the same order, and the same logits, so that no chapter's numbers move.
"""

import functools
from dataclasses import replace

import pytest
import torch

from course_utils import attention, blocks, decoding, kvcache, llama, multihead
from course_utils import lm as lm_module
from course_utils.lm import DecoderLM, LMConfig

GPT_KEYS = [
    "embed.table.weight", "embed.positions.embedding.weight",
    *(f"stack.layers.0.self_attn.{p}_proj.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")),
    *(f"stack.layers.0.ff.linear{i}.{w}" for i in (1, 2) for w in ("weight", "bias")),
    *(f"stack.layers.0.norm{i}.{w}" for i in (1, 2) for w in ("weight", "bias")),
    "stack.norm.weight", "stack.norm.bias", "lm_head.weight", "lm_head.bias",
]
LLAMA_KEYS = [
    "embed.table.weight", *(f"stack.layers.0.self_attn.{p}_proj.weight" for p in ("q", "k", "v", "out")),
    *(f"stack.layers.0.ff.{p}_proj.weight" for p in ("gate", "up", "down")),
    "stack.layers.0.norm1.weight", "stack.layers.0.norm2.weight", "stack.norm.weight", "lm_head.weight",
]


def _fingerprint(model: DecoderLM, vocab: int) -> tuple:
    """(weighted sum of the state dict in its order, sum and |sum| of the logits of a padded batch)."""
    weighted = sum(float(v.double().sum()) * (i + 1) for i, v in enumerate(model.state_dict().values()))
    tokens = torch.arange(12).remainder(vocab - 4).add(4).view(2, 6)
    tokens[1, 4:] = 0                                                          # padding at the end
    with torch.no_grad():
        y = model.eval()(tokens).double()
    return weighted, float(y.sum()), float(y.abs().sum())


@pytest.mark.parametrize("build, keys, want", [
    (lambda: DecoderLM(LMConfig.gpt(23, d_model=16, n_heads=4, n_layers=1, max_len=12, n_kv_heads=2, ffn="gelu")),
     GPT_KEYS, (724.00162, 7.22145, 135.05485)),
    (lambda: DecoderLM(LMConfig.gpt(23, d_model=16, n_heads=4, n_layers=1, max_len=12, tie_weights=True)),
     [k for k in GPT_KEYS if k != "lm_head.bias"], (925.483626, 36.81478, 281.4355)),
    (lambda: llama.ModernDecoder(llama.DecoderConfig(vocab_size=23, d_model=16, n_heads=4, n_layers=1, n_kv_heads=2)),
     LLAMA_KEYS, (439.437784, 21.26242, 131.32291)),
], ids=["gpt", "gpt-tied", "llama"])
def test_presets_build_the_old_classes_parameters_and_logits(build, keys, want):
    torch.manual_seed(0)
    model = build()
    assert type(model) is DecoderLM
    assert list(model.state_dict()) == keys
    got = _fingerprint(model, 23)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-4)


def test_the_old_names_build_the_one_class():
    gpt = DecoderLM(LMConfig.gpt(20, d_model=16, n_heads=2))
    modern = llama.ModernDecoder(llama.DecoderConfig(vocab_size=20, d_model=16, n_heads=2))
    assert type(gpt) is type(modern) is DecoderLM and llama.ModernDecoder is DecoderLM
    assert gpt.cfg == LMConfig.gpt(20, d_model=16, n_heads=2)
    assert modern.cfg == LMConfig.llama(20, d_model=16, n_heads=2)
    assert modern.layers[0].self_attn.rope and not gpt.layers[0].self_attn.rope
    assert modern.cfg.pad_id is None and gpt.cfg.pad_id == 0


def test_replace_on_the_lm_config_derives_widths_and_the_block():
    cfg = LMConfig.llama(50, d_model=64, n_heads=4, n_kv_heads=2)
    assert cfg.ff_width == blocks.swiglu_hidden(64) and cfg.kv_heads == 2 and cfg.block.rope
    wider = replace(cfg, d_model=128)
    assert wider.ff_width == blocks.swiglu_hidden(128) and wider.block.ff_width == wider.ff_width
    relu = replace(cfg, ffn="relu", positions="learned")
    assert relu.ff_width == 4 * 64 and not relu.block.rope
    assert replace(cfg, n_kv_heads=None).kv_heads == 4
    with pytest.raises(ValueError, match="positions must be one of"):
        LMConfig.gpt(10, positions="alibi")
    with pytest.raises(ValueError, match="positions='rope'"):
        LMConfig.gpt(10, rope=True)
    with pytest.raises(ValueError, match="even"):
        LMConfig.llama(10, d_model=12, n_heads=4)                       # RoPE needs an even head size


def _models():
    torch.manual_seed(0)
    return {"gpt": DecoderLM(LMConfig.gpt(21, d_model=16, n_heads=4, n_layers=2, max_len=32, n_kv_heads=2)).eval(),
            "llama": llama.ModernDecoder(llama.DecoderConfig(vocab_size=21, d_model=16, n_heads=4, n_kv_heads=2)).eval()}


@pytest.mark.parametrize("name", ["gpt", "llama"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_prefill_equals_step_by_step_feeding(name, bidirectional):
    model = _models()[name]
    prompt = torch.randint(4, 21, (3, 6), generator=torch.Generator().manual_seed(1))
    nxt = torch.randint(4, 21, (3, 4), generator=torch.Generator().manual_seed(2))
    fast = model.prefill(prompt, bidirectional=bidirectional)
    assert len(fast) == 6 and all(len(layer) == 6 for layer in fast.layers)
    if bidirectional:        # the reference: teacher forcing with the prompt as the prefix
        want = torch.log_softmax(model(torch.cat([prompt, nxt], 1), prefix_len=6), -1)[:, 6:]
    else:
        _, slow = decoding.prefill(model.decode_step, model.init_state(3), prompt)
        for a, b in zip(fast.layers, slow.layers):
            torch.testing.assert_close(a.k, b.k, atol=1e-5, rtol=1e-5)
        want = torch.stack([model.decode_step(nxt[:, t], slow)[0] for t in range(1)], 1)
    state = fast
    for t in range(want.shape[1]):
        log_probs, state = model.decode_step(nxt[:, t], state)
        torch.testing.assert_close(log_probs, want[:, t], atol=1e-5, rtol=1e-5)
    assert len(state) == 6 + want.shape[1] and state.prefix_len == (6 if bidirectional else 0)


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_the_cache_knows_its_length_and_refuses_a_stale_step(name):
    model = _models()[name]
    cache = model.init_state(2)
    assert isinstance(cache, kvcache.DecoderCache) and len(cache) == 0 and cache.batch_size == 2
    cache = model.prefill(torch.tensor([[4, 5, 6], [7, 8, 9]]), cache)
    _, after = model.decode_step(torch.tensor([4, 4]), cache)
    assert len(after) == 4
    _, after2 = model.decode_step(torch.tensor([5, 5]), after)
    assert len(after2) == 5 and after2.layers is cache.layers
    # One source of the length (issue 51): the layers. A state left behind shares them, so it reads
    # their length; and it can be neither stepped, fed, cropped nor branched.
    assert len(cache) == len(after) == 5 == len(after2.layers[0])
    for stale in (cache, after):
        with pytest.raises(ValueError, match="stepped already"):
            model.decode_step(torch.tensor([5, 5]), stale)
        for use in (lambda s: s.crop(1), lambda s: s.reorder(torch.tensor([0])), lambda s: s.feed(torch.ones(2, 1))):
            with pytest.raises(ValueError, match="stepped already"):
                use(stale)
    assert len(after2) == 5
    branch = decoding.index_state(after2, torch.tensor([1, 1, 0]))
    assert len(branch) == 5 and decoding.state_batch_size(branch) == 3 and branch.layers[0].k.shape[0] == 3
    assert len(after2.crop(2)) == 2 and len(after2.layers[0]) == 2


def _count_passes(model):
    """The forward passes of ``model``'s stack: a hook appends each pass's input shape ``(batch, T, d)``."""
    calls = []
    handle = model.stack.register_forward_hook(lambda module, args, out: calls.append(tuple(args[0].shape)))
    return calls, handle


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_decoding_helpers_prefill_the_prompt_in_one_pass(name):
    """The model, or any step function (a ``functools.partial``, a lambda: nothing to introspect) with
    ``prefill=model.prefill``: one pass over the prompt, one per token, the same tokens. A step with
    ``prefill=decoding.stepwise(step)`` feeds the prompt one token at a time: P - 1 more passes."""
    model = _models()[name]
    prompt = torch.randint(4, 21, (1, 8), generator=torch.Generator().manual_seed(3))
    steps = {"model": (model, None),
             "partial": (functools.partial(DecoderLM.decode_step, model), model.prefill),
             "lambda": (lambda p, s: model.decode_step(p, s), model.prefill),
             "stepwise": (model.decode_step, decoding.stepwise(model.decode_step))}
    tokens, passes = {}, {}
    for key, (step, prefill) in steps.items():
        calls, handle = _count_passes(model)
        tokens[key], _ = decoding.sample_decode(step, model.init_state(1), 16, eos_id=-1, prompt=prompt,
                                                prefill=prefill, generator=torch.Generator().manual_seed(0))
        handle.remove()
        passes[key] = calls
    assert passes["model"] == [(1, 7, 16)] + [(1, 1, 16)] * 16      # 1 prefill pass + 16 steps
    assert passes["partial"] == passes["lambda"] == passes["model"]
    assert len(passes["stepwise"]) == 7 + 16
    for key in ("partial", "lambda", "stepwise"):
        assert torch.equal(tokens[key], tokens["model"]), key


def test_decoding_helpers_refuse_an_unclear_prefill():
    model = _models()["gpt"]
    prompt = torch.tensor([[4, 5, 6]])
    with pytest.raises(ValueError, match="a prompt needs a prefill"):
        decoding.greedy_decode(model.decode_step, model.init_state(1), 3, prompt=prompt)
    with pytest.raises(ValueError, match="its own prefill"):
        decoding.greedy_decode(model, model.init_state(1), 3, prompt=prompt, prefill=model.prefill)
    with pytest.raises(TypeError, match="prefill must be a function"):
        decoding.beam_search(model.decode_step, model.init_state(1), 3, prompt=prompt, prefill=3)
    with pytest.raises(TypeError, match="the first argument is the model"):
        decoding.sample_decode("gpt", model.init_state(1), 3)
    decoding.greedy_decode(model.decode_step, model.init_state(1), 3)   # no prompt: a bare step is enough
    decoding.greedy_decode(model.decode_step, model.init_state(1), 3, prompt=prompt[:, -1:])   # nor for one token


def _masked_step(model, prev, state):
    """A cached step as DecoderLM took it before issue 51: a causal mask built (and checked by every
    layer) for the one query, ``(1, T_k)``, all True."""
    state = state.fork()
    t0 = state.feed(prev[:, None])
    mask = attention.causal_mask(1, t0 + 1)
    x = model.stack(model.embed(prev[:, None], offset=t0), mask=mask, caches=state.layers).x
    return torch.log_softmax(model.lm_head(x)[:, -1], dim=-1, dtype=torch.float32), state


@pytest.mark.parametrize("name", ["gpt", "llama"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_a_decoding_step_builds_no_mask_and_decodes_the_same_bits(name, bidirectional, monkeypatch):
    """One query attends to the whole cache: the step builds and checks no mask (issue 51), and its
    log-probabilities are bit for bit those of the step with the all-True mask, so are its tokens."""
    model = _models()[name]
    prompt = torch.randint(4, 21, (3, 6), generator=torch.Generator().manual_seed(5))
    runs = {}
    for how, step in (("mask", functools.partial(_masked_step, model)), ("no mask", model.decode_step)):
        seen = []
        record = lambda p, s, step=step, seen=seen: (lambda out: (seen.append(out[0]), out)[1])(step(p, s))
        tokens, _ = decoding.greedy_decode(record, model.prefill(prompt[:, :-1], bidirectional=bidirectional), 12,
                                           eos_id=-1, prompt=prompt[:, -1:], prefill=model.prefill)
        runs[how] = tokens, torch.stack(seen)
    assert torch.equal(runs["mask"][0], runs["no mask"][0])
    assert torch.equal(runs["mask"][1], runs["no mask"][1])
    built, state = [], model.prefill(prompt[:, :-1])
    monkeypatch.setattr(lm_module, "causal_mask", lambda *a, **k: built.append(a))
    monkeypatch.setattr(multihead, "_check_mask", lambda *a, **k: built.append(a))
    model.decode_step(prompt[:, -1], state)
    assert built == [], "a decoding step built or checked a mask"


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_beam_search_through_prefill_equals_token_by_token(name):
    model = _models()[name]
    prompt = torch.randint(4, 21, (1, 7), generator=torch.Generator().manual_seed(4))
    fast = decoding.beam_search(model, model.init_state(1), 6, beam_size=3, eos_id=5, prompt=prompt)
    slow = decoding.beam_search(model.decode_step, model.init_state(1), 6, beam_size=3, eos_id=5, prompt=prompt,
                                prefill=decoding.stepwise(model.decode_step))      # fed token by token
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-5)


def test_rope_angles_are_computed_once_per_forward(monkeypatch):
    model = llama.ModernDecoder(llama.DecoderConfig(vocab_size=21, d_model=16, n_heads=4, n_layers=3)).eval()
    calls = []
    real = blocks.rope_cos_sin
    monkeypatch.setattr(blocks, "rope_cos_sin", lambda *a, **k: calls.append(1) or real(*a, **k))

    def per_layer(*a, **k):
        raise AssertionError("a layer recomputed RoPE's angles")

    monkeypatch.setattr(multihead, "apply_rope_half", per_layer)
    state = model.prefill(torch.tensor([[4, 5, 6, 7]]))
    model.decode_step(torch.tensor([8]), state)
    assert len(calls) == 2                               # one prefill forward, one step: 3 layers each
    monkeypatch.undo()
    alone = multihead.MultiHeadAttention(16, 4, rope=True)  # used alone it still rotates by itself
    x = torch.randn(1, 5, 16)
    cache = kvcache.KVCache()
    parts = [alone(x[:, :3], cache=cache, causal=True)[0], alone(x[:, 3:], cache=cache, causal=True)[0]]
    torch.testing.assert_close(torch.cat(parts, 1), alone(x, causal=True)[0], atol=1e-6, rtol=1e-5)


def test_a_cache_in_the_prefix_len_place_says_where_it_goes():
    model = _models()["gpt"]
    with pytest.raises(TypeError, match="cache="):
        model(torch.tensor([[4, 5]]), model.init_state(1))
