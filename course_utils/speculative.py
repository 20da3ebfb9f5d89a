"""Speculative decoding: a small draft model proposes, the target model verifies (chapter 9).

Leviathan, Kalman and Matias ("Fast Inference from Transformers via Speculative Decoding", ICML
2023) and Chen et al. ("Accelerating Large Language Model Decoding with Speculative Sampling", 2023):
the draft proposes ``gamma`` tokens ``x_1..x_gamma`` from its distributions ``q_i``; the target scores
all of them in one forward pass, giving ``p_1..p_{gamma+1}``. Token ``x_i`` is accepted with
probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first rejection the token is drawn instead from
the residual ``normalize(max(0, p_i - q_i))`` and the step ends; when all ``gamma`` are accepted a
bonus token is drawn from ``p_{gamma+1}``. The tokens emitted are distributed exactly as the target's
own samples (Leviathan et al., Theorem 3.5 / Appendix A.1). With ``alpha`` the expected acceptance
rate, a step emits ``(1 - alpha**(gamma + 1)) / (1 - alpha)`` tokens on average (their Eq. 1,
:func:`expected_tokens_per_step`) for one target pass (Leviathan et al. choose gamma per pair of
models from alpha and the cost ratio; Chen et al. call it the lookahead K).

Greedy decoding is the special case where ``p`` and ``q`` are one-hot on their argmax: a draft
token is accepted exactly when it is the target's argmax, and the correction is the target's
argmax, so greedy speculative decoding emits the target's greedy tokens, token for token.

:func:`speculative_generate` works with the course's :class:`~course_utils.lm.DecoderLM`: both
models keep their :class:`~course_utils.kvcache.DecoderCache`, and after each step the rejected
positions are rolled back with :meth:`~course_utils.kvcache.DecoderCache.crop`.

Shapes: ``p (gamma + 1, V)``, ``q (gamma, V)``, ``draft_tokens (gamma,)``; a prompt ``(1, P)``.
"""

from __future__ import annotations

import torch

from course_utils._validate import check_int

__all__ = ["accept", "expected_tokens_per_step", "residual_distribution", "speculative_generate", "verify_draft"]


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``normalize(max(0, p - q))`` over the last axis: where a rejected draft token is replaced
    from. Where ``p == q`` (nothing is ever rejected) it returns ``p``."""
    r = (p - q).clamp(min=0)
    total = r.sum(-1, keepdim=True)
    return torch.where(total > 0, r / total.clamp(min=torch.finfo(p.dtype).tiny), p)


def _check_accept(p, q, draft_tokens) -> None:
    for name, x in (("p", p), ("q", q), ("draft_tokens", draft_tokens)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if q.dim() != 2 or p.dim() != 2 or draft_tokens.dim() != 1:
        raise ValueError(f"p must be (gamma + 1, V), q (gamma, V) and draft_tokens (gamma,), got "
                         f"{tuple(p.shape)}, {tuple(q.shape)} and {tuple(draft_tokens.shape)}")
    gamma = q.shape[0]
    if p.shape != (gamma + 1, q.shape[1]) or draft_tokens.shape != (gamma,):
        raise ValueError(f"with q (gamma, V) = {tuple(q.shape)}, p must be {(gamma + 1, q.shape[1])} and "
                         f"draft_tokens ({gamma},), got {tuple(p.shape)} and {tuple(draft_tokens.shape)}")
    if draft_tokens.is_floating_point() or ((draft_tokens < 0) | (draft_tokens >= q.shape[1])).any():
        raise ValueError(f"draft_tokens must be integer ids in [0, {q.shape[1]}), got {draft_tokens.tolist()}")
    if (p < 0).any() or (q < 0).any():
        raise ValueError("p and q must be probabilities (no negative entries)")


def verify_draft(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor,
                 u: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The verification of one speculative step with its uniforms given: the deterministic part of
    :func:`accept` (chapter 9's exercise 3).

    Draft token ``x_i`` is kept when ``u[i] * q[i, x_i] < p[i, x_i]`` (``u[i] < p/q``, written without
    dividing); the step stops at the first rejection. Args as in :func:`accept`, and ``u (gamma,)``
    uniforms in [0, 1). Returns ``(n, dist)``: ``n`` the number of draft tokens kept (a Python int),
    ``dist (V,)`` the distribution the next token is drawn from: the residual
    ``normalize(max(0, p[n] - q[n]))`` when ``n < gamma``, the bonus ``p[gamma]`` when ``n == gamma``.
    """
    _check_accept(p, q, draft_tokens)
    if not isinstance(u, torch.Tensor) or u.shape != draft_tokens.shape:
        raise ValueError(f"u must be a ({draft_tokens.shape[0]},) tensor of uniforms, got "
                         f"{tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__}")
    for i, x in enumerate(draft_tokens.tolist()):
        if u[i] * q[i, x] >= p[i, x]:     # reject: u >= p/q (q(x) > 0: x was drawn from q)
            return i, residual_distribution(p[i], q[i])
    return len(draft_tokens), p[-1]


def accept(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor,
           generator: torch.Generator | None = None, verify=verify_draft) -> tuple[torch.Tensor, int]:
    """The verification of one speculative step.

    Args:
        p: the target's probabilities ``(gamma + 1, V)`` at the draft's ``gamma`` positions and one more.
        q: the draft's probabilities ``(gamma, V)``, from which ``draft_tokens`` were drawn.
        draft_tokens: ``(gamma,)`` ids.
        generator: the random source: ``gamma`` uniforms first, then the corrected or bonus draw.
        verify: the function that decides, :func:`verify_draft` or one of its signature (a learner's).
    Returns:
        ``(accepted, next_token)``: ``accepted`` the ``n <= gamma`` draft tokens kept (a prefix of
        ``draft_tokens``), ``next_token`` the token drawn from the residual at position ``n + 1``
        (when ``n < gamma``) or the bonus token from ``p[gamma]`` (when ``n == gamma``).
    """
    _check_accept(p, q, draft_tokens)
    u = torch.rand(draft_tokens.shape, generator=generator, dtype=p.dtype, device=p.device)
    n, dist = verify(p, q, draft_tokens, u)
    return draft_tokens[:n], int(torch.multinomial(dist, 1, generator=generator))


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """Leviathan et al.'s Eq. 1: the expected tokens one step emits, ``(1 - alpha**(gamma + 1)) /
    (1 - alpha)`` for an acceptance rate ``alpha`` in [0, 1] (``gamma + 1`` at ``alpha = 1``)."""
    check_int(gamma, "gamma", low=0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def _probs(logits: torch.Tensor, greedy: bool) -> torch.Tensor:
    """Next-token probabilities ``(..., V)`` from logits: one-hot on the argmax when greedy."""
    if greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return torch.softmax(logits, dim=-1)


def _feed(model, cache, seq: torch.Tensor) -> torch.Tensor:
    """Feed the tokens of ``seq (1, T)`` the cache has not seen; the logits of the last ``(V,)``."""
    return model(seq[:, len(cache):], cache=cache)[0, -1]


def _draft(draft, cache, seq, gamma, greedy, generator):
    """The draft's ``gamma`` tokens ``(gamma,)`` and their distributions ``q (gamma, V)``."""
    tokens, qs = [], []
    logits = _feed(draft, cache, seq)
    for i in range(gamma):
        q = _probs(logits, greedy)
        x = q.argmax() if greedy else torch.multinomial(q, 1, generator=generator)[0]
        tokens.append(x)
        qs.append(q)
        if i < gamma - 1:
            logits = draft(x.view(1, 1), cache=cache)[0, -1]
    return torch.stack(tokens), torch.stack(qs)


@torch.no_grad()
def speculative_generate(target, draft, prompt: torch.Tensor, gamma: int, n_new: int,
                         greedy: bool = True, generator: torch.Generator | None = None,
                         verify=verify_draft) -> tuple[torch.Tensor, dict[str, int]]:
    """Generate ``n_new`` tokens after ``prompt (1, P)`` (P >= 1) with ``target`` verifying ``gamma``
    tokens of ``draft`` per step; both are :class:`~course_utils.lm.DecoderLM` with caches (one
    vocabulary). ``greedy``: argmax decoding (equal to the target's greedy decoding); otherwise
    sampling at temperature 1 (distributed as the target's samples). ``verify``: as in :func:`accept`.

    Returns ``(tokens (1, n_new), stats)`` with ``stats``: ``target_passes`` (forward passes of the
    target), ``drafted`` and ``accepted`` (draft tokens proposed and kept), ``rejected`` (steps that
    ended on a rejection). The draft tokens after a rejection are never tested, so the acceptance
    rate, Leviathan et al.'s ``alpha``, is ``accepted / (accepted + rejected)``, not ``accepted / drafted``."""
    check_int(gamma, "gamma", low=1)
    check_int(n_new, "n_new", low=1)
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be a (1, P) tensor of ids with P >= 1, got "
                         f"{tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__}")
    if target.cfg.vocab_size != draft.cfg.vocab_size:
        raise ValueError(f"target and draft must share a vocabulary: {target.cfg.vocab_size} and {draft.cfg.vocab_size}")
    seq = prompt
    t_cache, d_cache = target.init_state(1, prompt.device), draft.init_state(1, prompt.device)
    stats = {"target_passes": 0, "drafted": 0, "accepted": 0, "rejected": 0}
    while seq.shape[1] < prompt.shape[1] + n_new:
        xs, q = _draft(draft, d_cache, seq, gamma, greedy, generator)
        p = _probs(target(torch.cat([seq[:, len(t_cache):], xs[None]], dim=1), cache=t_cache)[0, -gamma - 1:], greedy)
        kept, nxt = accept(p, q, xs, generator, verify)
        seq = torch.cat([seq, kept[None], torch.tensor([[nxt]], device=seq.device)], dim=1)
        t_cache.crop(seq.shape[1] - 1)                         # roll back the rejected positions
        d_cache.crop(min(len(d_cache), seq.shape[1] - 1))
        stats["target_passes"] += 1
        stats["drafted"] += gamma
        stats["accepted"] += len(kept)
        stats["rejected"] += int(len(kept) < gamma)
    return seq[:, prompt.shape[1]:prompt.shape[1] + n_new], stats
