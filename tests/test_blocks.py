"""The one Transformer block, the stack, the token embedding and RoPE inside attention."""

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention, blocks, decoding, kvcache, multihead, positional
from course_utils import transformer as T
from course_utils.lm import DecoderLM, LMConfig


def _perturbed(block: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    for p in block.parameters():            # norms start at gain 1, bias 0: move them so that order matters
        p.data.add_(0.2 * torch.randn_like(p))
    return block.eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_block_equals_pytorch_layer(norm_first, cross):
    torch.manual_seed(1)
    kind = torch.nn.TransformerDecoderLayer if cross else torch.nn.TransformerEncoderLayer
    ref = kind(d_model=16, nhead=4, dim_feedforward=24, batch_first=True, norm_first=norm_first, dropout=0.0).eval()
    ours = blocks.TransformerBlock(d_model=16, n_heads=4, d_ff=24, norm_first=norm_first, cross_attention=cross).eval()
    T.copy_torch_layer(ours, ref)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keep = attention.padding_mask(torch.tensor([7, 3]), 7)[:, 0]          # (2, 7)
    with torch.no_grad():
        if cross:
            want = ref(x, memory, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.bool),
                       memory_key_padding_mask=~keep)
            got = ours(x, causal=True, memory=memory, memory_mask=keep[:, None, None, :])
        else:
            want = ref(x, src_key_padding_mask=~keep[:, :5])
            got = ours(x, mask=keep[:, None, None, :5])
    assert isinstance(got, blocks.BlockOutput) and got.self_weights is None and got.cross_weights is None
    torch.testing.assert_close(got.x, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cfg", [dict(), dict(norm_first=True), dict(n_kv_heads=1, norm_first=True),
                                 dict(norm="rms", ffn="swiglu", rope=True, attention_bias=False, norm_first=True),
                                 dict(ffn="gelu", n_kv_heads=2)])
def test_cached_block_equals_the_full_causal_pass(cfg):
    block = _perturbed(blocks.TransformerBlock(d_model=16, n_heads=4, **cfg))
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        full = block(x, causal=True).x
        cache = kvcache.KVCache()
        parts = [block(x[:, :4], cache=cache, causal=True).x]
        parts += [block(x[:, t:t + 1], cache=cache, causal=True).x for t in range(4, 9)]
    assert len(cache) == 9
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=0)


def test_block_weights_are_rows_of_a_softmax_and_only_when_asked():
    block = _perturbed(blocks.TransformerBlock(d_model=8, n_heads=2, cross_attention=True))
    y, memory = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
    out = block(y, causal=True, memory=memory, need_weights=True)
    assert out.self_weights.shape == (3, 2, 4, 4) and out.cross_weights.shape == (3, 2, 4, 6)
    assert torch.triu(out.self_weights, diagonal=1).abs().max() == 0            # causal
    torch.testing.assert_close(out.cross_weights.sum(-1), torch.ones(3, 2, 4))
    torch.testing.assert_close(out.x, block(y, causal=True, memory=memory).x, atol=1e-5, rtol=0)


def test_block_says_what_is_wrong():
    enc = blocks.TransformerBlock(d_model=8, n_heads=2)
    dec = blocks.TransformerBlock(d_model=8, n_heads=2, cross_attention=True)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match="no cross-attention"):
        enc(x, memory=x)
    with pytest.raises(ValueError, match="pass memory"):
        dec(x)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        blocks.TransformerBlock(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="ffn must be one of"):
        blocks.BlockConfig(ffn="tanh")
    with pytest.raises(ValueError, match="self-attention only"):
        blocks.BlockConfig(rope=True, cross_attention=True)
    with pytest.raises(ValueError, match="dropout"):
        blocks.BlockConfig(dropout=1.0)
    with pytest.raises(TypeError, match="BlockConfig"):
        blocks.TransformerBlock({"d_model": 8})
    with pytest.raises(ValueError, match="one KVCache per layer"):
        blocks.TransformerStack(blocks.BlockConfig(d_model=8, n_heads=2), 2)(x, caches=[kvcache.KVCache()])


def test_config_defaults_and_a_block_from_fields_or_config():
    cfg = blocks.BlockConfig(d_model=96, n_heads=4, ffn="swiglu")
    assert cfg.ff_width == blocks.swiglu_hidden(96) and cfg.kv_heads == 4
    assert blocks.BlockConfig(d_model=32, n_heads=4).ff_width == 128
    a = blocks.TransformerBlock(cfg)
    b = blocks.TransformerBlock(cfg, norm_first=True)
    assert not a.norm_first and b.norm_first and b.cfg.ffn == "swiglu"
    assert isinstance(a.ff, blocks.SwiGLU) and a.cross_attn is None and a.norm3 is None


def test_stack_shares_one_block_and_adds_a_final_norm_for_pre_ln():
    cfg = blocks.BlockConfig(d_model=8, n_heads=2, norm_first=True)
    shared = blocks.TransformerStack(cfg, 3, share_layers=True)
    assert shared.layers[0] is shared.layers[2] and isinstance(shared.norm, torch.nn.LayerNorm)
    post = blocks.TransformerStack(blocks.BlockConfig(d_model=8, n_heads=2), 2)
    assert isinstance(post.norm, torch.nn.Identity)
    out = post(torch.randn(2, 5, 8), need_weights=True)
    assert len(out.self_weights) == 2 and out.cross_weights == [None, None]


def test_rope_inside_attention_rotates_q_and_k_at_the_cache_offset():
    torch.manual_seed(0)
    mha = multihead.MultiHeadAttention(16, 4, 2, bias=False, rope=True).eval()
    x = torch.randn(2, 6, 16)
    q = multihead.split_heads(mha.q_proj(x), 4)
    k = multihead.split_heads(mha.k_proj(x), 2)
    v = multihead.split_heads(mha.v_proj(x), 2)
    q, k = positional.apply_rope_half(q), positional.apply_rope_half(k)
    want = F.scaled_dot_product_attention(q, multihead.repeat_kv(k, 2), multihead.repeat_kv(v, 2), is_causal=True)
    want = mha.out_proj(multihead.merge_heads(want))
    with torch.no_grad():
        torch.testing.assert_close(mha(x, causal=True)[0], want, atol=1e-5, rtol=0)
        cache = kvcache.KVCache()
        mha(x[:, :5], cache=cache, causal=True)
        last = mha(x[:, 5:], cache=cache, causal=True)[0]        # position 5, not 0
    torch.testing.assert_close(last, want[:, 5:], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="self-attention"):
        mha(x, context=x)
    with pytest.raises(ValueError, match="even"):
        multihead.MultiHeadAttention(12, 4, rope=True)             # d_head 3


def test_token_embedding_scales_adds_positions_and_rejects_floats():
    torch.manual_seed(0)
    emb = blocks.TokenEmbedding.build(10, 8, "sinusoidal", max_len=20)
    ids = torch.tensor([[1, 2, 3]])
    want = emb.table(ids) * 8 ** 0.5 + positional.sinusoidal_encoding(20, 8)[5:8]
    torch.testing.assert_close(emb(ids, offset=5), want)
    assert emb.weight is emb.table.weight
    with pytest.raises(ValueError, match="integer ids"):
        emb(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="positional must be one of"):
        positional.positional_embedding("alibi", 8, 10)


def test_decode_step_advances_the_caches_in_place_and_index_state_copies_them():
    """The cache contract: ``decode_step`` extends the caches of the state it is given (so that
    state must not be stepped twice); ``decoding.index_state`` (what beam search steps) returns
    copies whose steps leave the original untouched."""
    torch.manual_seed(3)
    model = T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=12, tgt_vocab=10, d_model=16, n_heads=4, n_layers=2)).eval()
    src, lengths = torch.tensor([[4, 5, 6, 7]]), torch.tensor([4])
    with torch.no_grad():
        state = model.encode(src, lengths)
        _, after = model.decode_step(torch.tensor([1]), state)
        assert after["cache"].layers[0] is state["cache"].layers[0] and len(state["cache"].layers[0]) == 1
        assert len(after["cache"]) == 1
        with pytest.raises(ValueError, match="stepped already"):
            model.decode_step(torch.tensor([1]), state)
        copy = decoding.index_state(after, torch.tensor([0]))
        _, stepped = model.decode_step(torch.tensor([5]), copy)
    assert len(stepped["cache"].layers[0]) == 2 and len(after["cache"].layers[0]) == 1
    assert len(stepped["cache"].cross[0]) == 4 and stepped["cache"].cross[0] is not after["cache"].cross[0]


def _stale_states():
    """(model, state, next token) for each cached model: a state that decode_step has stepped."""
    from course_utils import llama
    torch.manual_seed(4)
    s2s = T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=12, tgt_vocab=10, d_model=16, n_heads=4, n_layers=2)).eval()
    lm = DecoderLM(LMConfig.gpt(20, d_model=16, n_heads=2)).eval()
    modern = llama.ModernDecoder(llama.DecoderConfig(vocab_size=30, d_model=16, n_heads=2, n_layers=2)).eval()
    cases = [(s2s, s2s.encode(torch.tensor([[4, 5, 6]]), torch.tensor([3]))),
             (lm, lm.prefill(torch.tensor([[4, 5, 6]]))), (modern, modern.prefill(torch.tensor([[4, 5, 6]])))]
    return cases


@pytest.mark.parametrize("case", range(3))
def test_stepping_a_state_twice_is_an_error_not_a_silent_wrong_answer(case):
    """The cache API without the trap: a state whose caches decode_step advanced refuses a second step."""
    model, state = _stale_states()[case]
    with torch.no_grad():
        _, new = model.decode_step(torch.tensor([1]), state)
        with pytest.raises(ValueError, match="stepped already"):
            model.decode_step(torch.tensor([7]), state)
        _, newer = model.decode_step(torch.tensor([7]), new)                        # the state returned is fine
        branch = decoding.index_state(newer, torch.tensor([0]))
        model.decode_step(torch.tensor([8]), branch)                                # a copy branches off
        model.decode_step(torch.tensor([9]), newer)                                 # and leaves newer current
        with pytest.raises(ValueError, match="stepped already"):
            model.decode_step(torch.tensor([8]), new)                               # new was stepped above


def test_every_model_follows_the_decoding_protocol():
    from course_utils import llama, rnn, rnn_attention
    seq2seq = [T.Seq2SeqTransformer(T.Seq2SeqConfig(src_vocab=12, tgt_vocab=10, d_model=16, n_heads=4)), rnn.Seq2Seq(12, 10, 8, 16),
               rnn_attention.BahdanauSeq2Seq(12, 10, 8, 16), rnn_attention.LuongSeq2Seq(12, 10, 8, 16)]
    prompted = [DecoderLM(LMConfig.gpt(20, d_model=16, n_heads=2)), llama.ModernDecoder(llama.DecoderConfig())]
    assert all(isinstance(m, decoding.EncoderDecoder) for m in seq2seq)
    assert all(isinstance(m, decoding.PromptedDecoder) and not isinstance(m, decoding.EncoderDecoder)
               for m in prompted)


def test_derived_widths_follow_the_config_they_belong_to():
    """Issue 34: ``d_ff`` and ``n_kv_heads`` left to their defaults are derived each time, never frozen
    into the config, so an override or ``dataclasses.replace`` gets the new config's widths."""
    from dataclasses import replace

    base = blocks.BlockConfig(d_model=64, n_heads=4)
    block = blocks.TransformerBlock(base, n_heads=8)                   # multi-head: 8 key/value heads
    assert block.self_attn.n_kv_heads == 8 and block.self_attn.k_proj.out_features == 64
    assert replace(base, d_model=128).ff_width == 512
    assert replace(base, ffn="swiglu").ff_width == blocks.swiglu_hidden(64)
    assert isinstance(blocks.TransformerBlock(replace(base, ffn="swiglu")).ff, blocks.SwiGLU)
    assert blocks.TransformerBlock(replace(base, d_model=128)).ff.linear1.out_features == 512
    given = blocks.BlockConfig(d_model=64, n_heads=4, d_ff=100, n_kv_heads=2)
    assert replace(given, d_model=128).ff_width == 100 and replace(given, n_heads=8).kv_heads == 2


def _models():
    """(model class, its config class, the fields of a small model) of every Transformer model."""
    from course_utils import families, lm, vit

    return [
        (T.Seq2SeqTransformer, T.Seq2SeqConfig, dict(src_vocab=11, tgt_vocab=13, d_model=32, n_heads=4, n_layers=2)),
        (families.EncoderOnly, families.EncoderConfig, dict(vocab_size=17, d_model=32, n_heads=4, n_layers=1, n_classes=3)),
        (vit.ViT, vit.ViTConfig, dict(patch=4, d_model=32, n_heads=4, n_layers=1)),
        (lm.DecoderLM, lm.LMConfig, dict(vocab_size=19, d_model=32, n_heads=4, n_layers=1)),
    ]


@pytest.mark.parametrize("i", range(4))
def test_every_transformer_model_has_a_config_built_on_block_config(i):
    """Issue 34: each model is built from a dataclass on BlockConfig (one place for its fields and
    defaults); the model keeps it, ``replace`` derives the widths anew, and a wrong field is refused."""
    from dataclasses import replace

    model_class, cls, small = _models()[i]
    model = model_class(cls(**small))
    cfg = model.cfg
    assert isinstance(cfg, cls) and isinstance(cfg, blocks.BlockConfig) and cfg == cls(**small)
    assert replace(cfg, d_model=64).ff_width == 256 and replace(cfg, ffn="swiglu").ff_width == blocks.swiglu_hidden(32)
    block = cfg.block_config()
    assert type(block) is blocks.BlockConfig and (block.d_model, block.n_heads, block.norm_first) == (
        cfg.d_model, cfg.n_heads, cfg.norm_first)
    assert block.ff_width == 4 * 32 and replace(block, d_model=64).ff_width == 256
    with pytest.raises(TypeError, match="unexpected keyword"):
        cls(**small, d_modle=32)
    with pytest.raises(ValueError, match="divisible"):
        cls(**{**small, "n_heads": 5})


@pytest.mark.parametrize("i", range(4))
def test_every_model_is_built_one_way_from_its_config_and_copies_none_of_its_fields(i):
    """Issue 51: ``Model(cfg)`` is the one way to build a model. Anything else (the old ``Model(vocab,
    **fields)``, a dict of fields, another model's config) is a TypeError that names the config and
    shows the call; the model reads its fields from ``model.cfg`` and keeps no copy of any of them,
    so a copy can never disagree with the config."""
    from dataclasses import fields

    model_class, cls, small = _models()[i]
    model = model_class(cls(**small))
    copied = set(vars(model)) & {f.name for f in fields(cls)}
    assert not copied, f"{model_class.__name__} copies config fields into attributes: {sorted(copied)}"
    _, other_cls, other_small = _models()[(i + 1) % 4]
    for wrong in (17, dict(small), blocks.BlockConfig(), other_cls(**other_small)):
        with pytest.raises(TypeError, match=rf"built from a {cls.__name__}: {model_class.__name__}\({cls.__name__}"):
            model_class(wrong)
    with pytest.raises(TypeError):
        model_class(**small)


@pytest.mark.parametrize("i", [0, 3])
def test_use_cache_is_the_config_switched_on_the_model(i):
    """A decoder's ``use_cache`` is its config's field: switching it on the model replaces
    ``model.cfg`` by a copy (the config another model shares stays as it was) and changes the state
    ``init_state``/``encode`` builds (keys and values, or the tokens to recompute)."""
    model_class, cls, small = _models()[i]
    cfg = cls(**small)
    model, other = model_class(cfg), model_class(cfg)
    model.use_cache = False
    assert model.cfg.use_cache is False and model.use_cache is False
    assert cfg.use_cache is True and other.use_cache is True and model.cfg is not cfg
    state = model.encode(torch.tensor([[4, 5, 6]]), torch.tensor([3]))["cache"] if i == 0 else model.init_state(1)
    assert state.layers is None and state.tokens is not None


def test_the_paper_preset_is_the_base_model_of_table_3():
    """``Seq2SeqConfig.paper``: Vaswani et al. (2017), Table 3's base row: N = 6, d_model = 512,
    d_ff = 2048, h = 8, d_k = d_v = 64, P_drop = 0.1, Post-LN, sinusoidal positions (built on the meta
    device: no memory, no time)."""
    cfg = T.Seq2SeqConfig.paper(100, 120)
    with torch.device("meta"):
        model = T.Seq2SeqTransformer(cfg)
    layer = model.decoder.layers[0]
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (6, 6)
    assert (cfg.d_model, cfg.ff_width, cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.dropout) == (512, 2048, 8, 64, 0.1)
    assert layer.ff.linear1.out_features == 2048 and layer.cross_attn is not None and not cfg.norm_first
    assert (cfg.src_vocab, cfg.tgt_vocab, cfg.positions) == (100, 120, "sinusoidal")
    assert T.Seq2SeqConfig.paper(100, 120, n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="positions must be one of"):
        T.Seq2SeqConfig(positions="rotary")
    with pytest.raises(ValueError, match="cross-attention"):
        T.Seq2SeqConfig(rope=True)
