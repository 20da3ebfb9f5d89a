"""Correct answers for chapter 1, written differently from the solution: each must get full marks.

``CORRECT = {exercise: {name: source}}``; each source replaces the whole answer cell.
"""

_BEAM_SORTED = '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    live = [([], 0.0)]                       # (prefix, summed log-probability)
    prev = torch.tensor([sos_id])
    finished = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        V = log_probs.shape[-1]
        total = torch.tensor([s for _, s in live], dtype=log_probs.dtype)[:, None] + log_probs
        order = torch.sort(total.flatten(), descending=True)
        keep = []
        for s, idx in zip(order.values.tolist(), order.indices.tolist()):
            row, tok = idx // V, idx % V
            if tok == eos_id:
                seq = live[row][0] + [tok]
                finished.append(decoding.Hypothesis(seq, s, s / len(seq) ** alpha, True))
                if len(finished) == beam_size:
                    break
            else:
                keep.append((row, tok, s))
                if len(keep) == beam_size:
                    break
        if len(finished) == beam_size or not keep:
            live = []
            break
        live = [(live[r][0] + [t], s) for r, t, s in keep]
        state = decoding.index_state(state, torch.tensor([r for r, _, _ in keep]))
        prev = torch.tensor([t for _, t, _ in keep])
    unfinished = [decoding.Hypothesis(p, s, s / len(p) ** alpha, False) for p, s in live]
    finished.sort(key=lambda h: h.normalized, reverse=True)
    unfinished.sort(key=lambda h: h.normalized, reverse=True)
    return (finished + unfinished)[:beam_size]
'''

_BEAM_PYTHON = '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    def norm(s, n):
        return s / (n ** alpha)
    beams = [(0.0, [])]
    prev = torch.tensor([sos_id])
    done = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        cands = []
        for r, (s, seq) in enumerate(beams):
            for tok, lp in enumerate(log_probs[r].tolist()):
                cands.append((s + lp, r, tok))
        cands.sort(key=lambda c: c[0], reverse=True)
        new = []
        for s, r, tok in cands:
            if len(done) >= beam_size or len(new) >= beam_size:
                break
            if tok == eos_id:
                seq = beams[r][1] + [tok]
                done.append(decoding.Hypothesis(seq, s, norm(s, len(seq)), True))
            else:
                new.append((s, r, tok))
        if len(done) >= beam_size or not new:
            beams = []
            break
        state = decoding.index_state(state, torch.tensor([r for _, r, _ in new]))
        beams = [(s, beams[r][1] + [tok]) for s, r, tok in new]
        prev = torch.tensor([tok for _, _, tok in new], dtype=torch.long)
    rest = [decoding.Hypothesis(seq, s, norm(s, len(seq)), False) for s, seq in beams]
    return (sorted(done, key=lambda h: -h.normalized) + sorted(rest, key=lambda h: -h.normalized))[:beam_size]
'''

CORRECT = {
    "ex1_rnn_forward": {
        "preallocated, input projection once (einsum)": '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    B, T, _ = x.shape
    xw = torch.einsum("btd,hd->bth", x, W_xh) + b_h
    states = x.new_zeros(B, T, W_hh.shape[0])
    h = h0
    for t in range(T):
        h = torch.tanh(xw[:, t] + torch.einsum("bh,kh->bk", h, W_hh))
        states[:, t] = h
    return states, h
''',
        "addmm, W^T x written as matmul on the right, cat of unsqueezed states": '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    h = h0
    outs = []
    for x_t in x.unbind(1):
        h = torch.tanh(torch.addmm(b_h, x_t, W_xh.t()) + torch.matmul(W_hh, h.unsqueeze(-1)).squeeze(-1))
        outs.append(h.unsqueeze(1))
    return torch.cat(outs, dim=1), outs[-1][:, 0]
''',
    },
    "ex2_decoder_io": {
        "pad_sequence": '''from torch.nn.utils.rnn import pad_sequence


def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    ins = [torch.tensor([sos_id] + list(t), dtype=torch.long) for t in targets]
    outs = [torch.tensor(list(t) + [eos_id], dtype=torch.long) for t in targets]
    return (pad_sequence(ins, batch_first=True, padding_value=pad_id),
            pad_sequence(outs, batch_first=True, padding_value=pad_id))
''',
        "python lists, then one tensor": '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    n = 1 + max(len(t) for t in targets)
    rows_in, rows_out = [], []
    for t in targets:
        pad = [pad_id] * (n - 1 - len(t))
        rows_in.append([sos_id] + [int(v) for v in t] + pad)
        rows_out.append([int(v) for v in t] + [eos_id] + pad)
    return torch.LongTensor(rows_in), torch.LongTensor(rows_out)
''',
    },
    "ex3_encode": {
        "one sentence at a time, no packing": '''def encode(encoder, src, src_lengths):
    B, S = src.shape
    states = []
    finals = []
    for b in range(B):
        n = int(src_lengths[b])
        out, h_n = encoder.rnn(encoder.embedding(src[b : b + 1, :n]))
        states.append(torch.cat([out[0], out.new_zeros(S - n, out.shape[-1])], dim=0))
        finals.append(h_n[:, 0].reshape(-1))
    return torch.stack(states), torch.tanh(encoder.bridge(torch.stack(finals)))
''',
        "packed; the final states read from the padded outputs": '''import torch.nn.utils.rnn as rnn_utils


def encode(encoder, src, src_lengths):
    H = encoder.hidden
    packed = rnn_utils.pack_padded_sequence(encoder.embedding(src), src_lengths.cpu(), batch_first=True,
                                            enforce_sorted=False)
    out, _ = encoder.rnn(packed)
    states, lengths = rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
    rows = torch.arange(src.shape[0])
    last = states[rows, lengths - 1, :H]
    if encoder.directions == 2:
        last = torch.cat([last, states[:, 0, H:]], dim=-1)
    return states, torch.tanh(encoder.bridge(last))
''',
    },
    "ex4_decoder_step": {
        "GRU equations by hand, logits minus logsumexp": '''def decoder_step(decoder, prev_tokens, hidden, context):
    g = decoder.rnn
    x = torch.cat([decoder.embedding(prev_tokens), context], dim=-1)
    gi = x @ g.weight_ih_l0.T + g.bias_ih_l0
    gh = hidden @ g.weight_hh_l0.T + g.bias_hh_l0
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    s = (1 - z) * n + z * hidden
    logits = decoder.out(torch.cat([s, context], dim=-1))
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True), s
''',
        "F.log_softmax, the GRU's output as the state": '''import torch.nn.functional as F


def decoder_step(decoder, prev_tokens, hidden, context):
    x = torch.cat((decoder.embedding(prev_tokens[:, None]), context[:, None, :]), dim=2)
    out, _ = decoder.rnn(x, hidden[None])
    s = out.squeeze(1)
    return F.log_softmax(decoder.out(torch.cat((s, context), dim=1)), dim=1), s
''',
    },
    "ex5_greedy": {
        "per-sentence python bookkeeping": '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    B = decoding.state_batch_size(state)
    rows = [[] for _ in range(B)]
    total = [0.0] * B
    finished = [False] * B
    prev = torch.tensor([sos_id] * B)
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best = log_probs.argmax(dim=-1)
        nxt = []
        for b in range(B):
            if finished[b]:
                rows[b].append(pad_id)
            else:
                tok = int(best[b])
                rows[b].append(tok)
                total[b] += float(log_probs[b, tok])
                finished[b] = tok == eos_id
            nxt.append(rows[b][-1])
        prev = torch.tensor(nxt)
        if all(finished):
            break
    return torch.tensor(rows, dtype=torch.long), torch.tensor(total)
''',
        "masks and gather, columns preallocated then cut": '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    B = decoding.state_batch_size(state)
    out = torch.full((B, max_len), pad_id, dtype=torch.long)
    alive = torch.ones(B, dtype=torch.bool)
    score = None
    prev = torch.full((B,), sos_id)
    n = 0
    while n < max_len and alive.any():
        log_probs, state = step(prev, state)
        tok = log_probs.argmax(-1)
        gain = log_probs.gather(1, tok[:, None])[:, 0] * alive
        score = gain if score is None else score + gain
        out[:, n] = torch.where(alive, tok, pad_id)
        alive = alive & (tok != eos_id)
        prev = out[:, n]
        n += 1
    return out[:, :n], score
''',
    },
    "ex6_beam": {
        "torch.sort of every candidate": _BEAM_SORTED,
        "python candidate lists": _BEAM_PYTHON,
    },
}
