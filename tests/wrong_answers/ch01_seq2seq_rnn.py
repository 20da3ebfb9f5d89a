"""Wrong answers for chapter 1.

``EXERCISE``/``SOURCE``: a typical mistake for exercise 2, no offset at all. Both decoder input
and target are the full [<sos>, y..., <eos>] sequence, so the decoder would be asked to predict
the token it is given (the visible tests catch it).

``MORE_WRONG``: wrong answers that each lose all of their exercise's points (visible and
hidden): a beam search that never reorders the decoder state (issue 19, point 1), a greedy
decoder that stops as soon as *any* sentence has ended, and one that never writes ``<pad>``
(point 2).

``HIDDEN_ONLY``: for every exercise, a plausible wrong answer that passes the visible tests and
fails the hidden ones, so each hidden test is shown to catch something.
"""

EXERCISE = "ex2_decoder_io"
SOURCE = '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    seqs = [[sos_id, *t, eos_id] for t in targets]
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = torch.tensor(s)
    return out, out
'''

HIDDEN_ONLY = {
    # Works in float32 "to be safe": right for float32 inputs, but float64 ones come back as float32.
    "ex1_rnn_forward": '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    h, states = h0.float(), []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t].float() @ W_xh.float().T + h @ W_hh.float().T + b_h.float())
        states.append(h)
    return torch.stack(states, dim=1), h
''',
    # Ignores its sos/eos/pad arguments and uses the module constants (right for the defaults).
    "ex2_decoder_io": '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    width = max(len(t) for t in targets) + 1
    dec_in = torch.full((len(targets), width), PAD_ID, dtype=torch.long)
    dec_out = torch.full((len(targets), width), PAD_ID, dtype=torch.long)
    for b, t in enumerate(targets):
        dec_in[b, : len(t) + 1] = torch.tensor([SOS_ID, *t])
        dec_out[b, : len(t) + 1] = torch.tensor([*t, EOS_ID])
    return dec_in, dec_out
''',
    # Assumes a bidirectional GRU: a one-directional encoder has no h_n[1].
    "ex3_encode": '''from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def encode(encoder, src, src_lengths):
    emb = encoder.embedding(src)
    packed = pack_padded_sequence(emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = encoder.rnn(packed)
    states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
    return states, torch.tanh(encoder.bridge(torch.cat([h_n[0], h_n[1]], dim=-1)))
''',
    # Runs the reference decoder's teacher-forced forward on a sequence of length 1.
    "ex4_decoder_step": '''def decoder_step(decoder, prev_tokens, hidden, context):
    logits, h = decoder(prev_tokens[:, None], hidden, context)
    return torch.log_softmax(logits[:, 0], dim=-1), h
''',
    # Pads finished sentences but keeps adding the log-probability of each step's argmax to
    # their score (only visible when sentences finish at different steps).
    "ex5_greedy": '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    batch = decoding.state_batch_size(state)
    prev = torch.full((batch,), sos_id, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch)
    written = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best_logp, best = log_probs.max(dim=-1)
        scores = scores + best_logp
        best = torch.where(done, torch.full_like(best, pad_id), best)
        written.append(best)
        done = done | (best == eos_id)
        prev = best
        if done.all():
            break
    return torch.stack(written, dim=1), scores
''',
    # Length normalisation that does not count <eos>: the same as the right one for alpha = 0.
    "ex6_beam": '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    prefixes, scores = [[]], torch.zeros(1)
    prev = torch.tensor([sos_id])
    finished = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        vocab = log_probs.shape[-1]
        flat = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_idx = flat.topk(min(2 * beam_size, flat.numel()))
        rows, toks, new_scores = [], [], []
        for s, i in zip(top_scores.tolist(), top_idx.tolist()):
            row, tok = divmod(i, vocab)
            if tok == eos_id:
                seq = prefixes[row] + [tok]
                finished.append(decoding.Hypothesis(seq, s, s / max(len(seq) - 1, 1) ** alpha, True))
                if len(finished) == beam_size:
                    break
            else:
                rows.append(row); toks.append(tok); new_scores.append(s)
                if len(rows) == beam_size:
                    break
        if len(finished) >= beam_size or not rows:
            prefixes = []
            break
        prefixes = [prefixes[r] + [t] for r, t in zip(rows, toks)]
        state = decoding.index_state(state, torch.tensor(rows))
        scores, prev = torch.tensor(new_scores), torch.tensor(toks)
    live = [decoding.Hypothesis(p, s, s / len(p) ** alpha, False) for p, s in zip(prefixes, scores.tolist())]
    best = sorted(finished, key=lambda h: -h.normalized) + sorted(live, key=lambda h: -h.normalized)
    return best[:beam_size]
''',
}

MORE_WRONG = {
    # Beam search that keeps the state as the step returned it: right with a step whose output
    # ignores the state, wrong (or crashing) with a real decoder, whose state rows must follow
    # the prefixes that survive (decoding.index_state).
    "beam_no_reorder": ("ex6_beam", '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    prefixes, scores = [[]], torch.zeros(1)
    prev = torch.tensor([sos_id])
    finished = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        vocab = log_probs.shape[-1]
        flat = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_idx = flat.topk(min(2 * beam_size, flat.numel()))
        rows, toks, new_scores = [], [], []
        for s, i in zip(top_scores.tolist(), top_idx.tolist()):
            row, tok = divmod(i, vocab)
            if tok == eos_id:
                seq = prefixes[row] + [tok]
                finished.append(decoding.Hypothesis(seq, s, s / len(seq) ** alpha, True))
                if len(finished) == beam_size:
                    break
            else:
                rows.append(row); toks.append(tok); new_scores.append(s)
                if len(rows) == beam_size:
                    break
        if len(finished) >= beam_size or not rows:
            prefixes = []
            break
        prefixes = [prefixes[r] + [t] for r, t in zip(rows, toks)]
        scores, prev = torch.tensor(new_scores), torch.tensor(toks)
    live = [decoding.Hypothesis(p, s, s / len(p) ** alpha, False) for p, s in zip(prefixes, scores.tolist())]
    best = sorted(finished, key=lambda h: -h.normalized) + sorted(live, key=lambda h: -h.normalized)
    return best[:beam_size]
'''),
    # Beam search that gives every prefix the state of the best one (row 0): the right number of
    # rows, so nothing crashes, but the wrong memory for prefixes that came from another row.
    "beam_state_of_row_0": ("ex6_beam", '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    prefixes, scores = [[]], torch.zeros(1)
    prev = torch.tensor([sos_id])
    finished = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        vocab = log_probs.shape[-1]
        flat = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_idx = flat.topk(min(2 * beam_size, flat.numel()))
        rows, toks, new_scores = [], [], []
        for s, i in zip(top_scores.tolist(), top_idx.tolist()):
            row, tok = divmod(i, vocab)
            if tok == eos_id:
                seq = prefixes[row] + [tok]
                finished.append(decoding.Hypothesis(seq, s, s / len(seq) ** alpha, True))
                if len(finished) == beam_size:
                    break
            else:
                rows.append(row); toks.append(tok); new_scores.append(s)
                if len(rows) == beam_size:
                    break
        if len(finished) >= beam_size or not rows:
            prefixes = []
            break
        prefixes = [prefixes[r] + [t] for r, t in zip(rows, toks)]
        state = decoding.index_state(state, torch.zeros(len(rows), dtype=torch.long))
        scores, prev = torch.tensor(new_scores), torch.tensor(toks)
    live = [decoding.Hypothesis(p, s, s / len(p) ** alpha, False) for p, s in zip(prefixes, scores.tolist())]
    best = sorted(finished, key=lambda h: -h.normalized) + sorted(live, key=lambda h: -h.normalized)
    return best[:beam_size]
'''),
    # Greedy decoding that stops as soon as one sentence has written <eos>: the others are cut.
    "greedy_stops_at_first_eos": ("ex5_greedy", '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    batch = decoding.state_batch_size(state)
    prev = torch.full((batch,), sos_id, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch)
    written = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best_logp, best = log_probs.max(dim=-1)
        best = torch.where(done, torch.full_like(best, pad_id), best)
        scores = scores + torch.where(done, torch.zeros_like(best_logp), best_logp)
        written.append(best)
        done = done | (best == eos_id)
        prev = best
        if done.any():
            break
    return torch.stack(written, dim=1), scores
'''),
    # Greedy decoding that stops scoring a finished sentence but keeps writing its argmax (never
    # <pad>): invisible when the table's row after <eos> happens to favour the pad id.
    "greedy_never_pads": ("ex5_greedy", '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    batch = decoding.state_batch_size(state)
    prev = torch.full((batch,), sos_id, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch)
    written = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best_logp, best = log_probs.max(dim=-1)
        scores = scores + torch.where(done, torch.zeros_like(best_logp), best_logp)
        written.append(best)
        done = done | (best == eos_id)
        prev = best
        if done.all():
            break
    return torch.stack(written, dim=1), scores
'''),
}


def _edit(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced (a wrong answer one edit away from a right one)."""
    assert source.count(old) == 1, old
    return source.replace(old, new)


_GREEDY = '''def greedy_decode(step, state, max_len, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    batch = decoding.state_batch_size(state)
    prev = torch.full((batch,), sos_id, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    scores = torch.zeros(batch)
    written = []
    for _ in range(max_len):
        log_probs, state = step(prev, state)
        best_logp, best = log_probs.max(dim=-1)
        best = torch.where(done, torch.full_like(best, pad_id), best)
        scores = scores + torch.where(done, torch.zeros_like(best_logp), best_logp)
        written.append(best)
        done = done | (best == eos_id)
        prev = best
        if done.all():
            break
    return torch.stack(written, dim=1), scores
'''

_BEAM = MORE_WRONG["beam_no_reorder"][1].replace(
    "        scores, prev = torch.tensor(new_scores), torch.tensor(toks)\n",
    "        state = decoding.index_state(state, torch.tensor(rows))\n"
    "        scores, prev = torch.tensor(new_scores), torch.tensor(toks)\n")

_ENCODE = '''from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def encode(encoder, src, src_lengths):
    emb = encoder.embedding(src)
    packed = pack_padded_sequence(emb, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, h_n = encoder.rnn(packed)
    states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
    last = torch.cat([h_n[0], h_n[1]], dim=-1) if encoder.directions == 2 else h_n[0]
    return states, torch.tanh(encoder.bridge(last))
'''

_DECODER_STEP = '''def decoder_step(decoder, prev_tokens, hidden, context):
    emb = decoder.embedding(prev_tokens)
    rnn_in = torch.cat([emb, context], dim=-1).unsqueeze(1)
    out, h = decoder.rnn(rnn_in, hidden.unsqueeze(0).contiguous())
    logits = decoder.out(torch.cat([out[:, 0], context], dim=-1))
    return torch.log_softmax(logits, dim=-1), h[0]
'''

# Reviewers' plausible wrong answers (issue 30) that the old hidden tests gave full marks; each must
# lose points on its exercise: ``{name: (exercise, source)}``.
REVIEWED = {
    # States preallocated with torch.zeros (float32): float64 inputs come back as float32.
    "rnn_float32_buffer": ("ex1_rnn_forward", '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    B, T, _ = x.shape
    states = torch.zeros(B, T, W_hh.shape[0])
    h = h0
    for t in range(T):
        h = torch.tanh(x[:, t] @ W_xh.T + h @ W_hh.T + b_h)
        states[:, t] = h
    return states, h
'''),
    # Truncated backpropagation: the state is detached at every step, so no gradient reaches h0,
    # W_hh or the earlier inputs (the vanishing-gradient plot would be meaningless).
    "rnn_detached_state": ("ex1_rnn_forward", '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    h = h0
    states = []
    for t in range(x.shape[1]):
        h = torch.tanh(x[:, t] @ W_xh.T + h.detach() @ W_hh.T + b_h)
        states.append(h)
    return torch.stack(states, dim=1), h
'''),
    # A ready-made cell (torch.rnn_tanh_cell) instead of the recurrence.
    "rnn_ready_made_cell": ("ex1_rnn_forward", '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    h, states = h0, []
    for t in range(x.shape[1]):
        h = torch.rnn_tanh_cell(x[:, t], h, W_xh, W_hh, b_h, torch.zeros_like(b_h))
        states.append(h)
    return torch.stack(states, dim=1), h
'''),
    # Appends <eos> to the caller's own lists (and reads them back): the targets change.
    "io_mutates_targets": ("ex2_decoder_io", '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    width = max(len(t) for t in targets) + 1
    dec_in = torch.full((len(targets), width), pad_id, dtype=torch.long)
    dec_out = torch.full((len(targets), width), pad_id, dtype=torch.long)
    for b, t in enumerate(targets):
        t.append(eos_id)
        dec_in[b, : len(t)] = torch.tensor([sos_id, *t[:-1]])
        dec_out[b, : len(t)] = torch.tensor(t)
    return dec_in, dec_out
'''),
    # Width from the first target (right when the longest comes first, as in the visible test).
    "io_width_of_first": ("ex2_decoder_io", '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    width = len(targets[0]) + 1
    dec_in = torch.full((len(targets), width), pad_id, dtype=torch.long)
    dec_out = torch.full((len(targets), width), pad_id, dtype=torch.long)
    for b, t in enumerate(targets):
        dec_in[b, : len(t) + 1] = torch.tensor([sos_id, *t])[:width]
        dec_out[b, : len(t) + 1] = torch.tensor([*t, eos_id])[:width]
    return dec_in, dec_out
'''),
    # The decoder target as int32 (the visible test checks the dtype of the input only).
    "io_target_int32": ("ex2_decoder_io", '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    width = max(len(t) for t in targets) + 1
    dec_in = torch.full((len(targets), width), pad_id, dtype=torch.long)
    dec_out = torch.full((len(targets), width), pad_id, dtype=torch.int32)
    for b, t in enumerate(targets):
        dec_in[b, : len(t) + 1] = torch.tensor([sos_id, *t])
        dec_out[b, : len(t) + 1] = torch.tensor([*t, eos_id])
    return dec_in, dec_out
'''),
    # No total_length: a batch padded beyond its longest sentence loses its last positions.
    "encode_no_total_length": ("ex3_encode", _edit(_ENCODE, ", total_length=src.shape[1]", "")),
    # enforce_sorted left at True: lengths that are not sorted (longest first) raise.
    "encode_sorted_lengths": ("ex3_encode", _edit(_ENCODE, ", enforce_sorted=False", "")),
    # The log of a softmax: -inf where a probability underflows.
    "decoder_log_of_softmax": ("ex4_decoder_step", _edit(
        _DECODER_STEP, "torch.log_softmax(logits, dim=-1)", "torch.log(torch.softmax(logits, dim=-1))")),
    # The context before the embedding in the GRU's input: runs only when emb_dim == hidden, and
    # is then wrong.
    "decoder_context_first": ("ex4_decoder_step", _edit(
        _DECODER_STEP, "torch.cat([emb, context], dim=-1)", "torch.cat([context, emb], dim=-1)")),
    # Passes the initial state at every step (the returned one is dropped).
    "greedy_ignores_new_state": ("ex5_greedy", _edit(
        _GREEDY, "log_probs, state = step(prev, state)", "log_probs, _ = step(prev, state)")),
    # Starts from the module's <sos> instead of the sos_id argument.
    "greedy_default_sos": ("ex5_greedy", _edit(
        _GREEDY, "torch.full((batch,), sos_id, dtype=torch.long)", "torch.full((batch,), SOS_ID, dtype=torch.long)")),
    # Recognises the module's <eos> instead of the eos_id argument.
    "beam_default_eos": ("ex6_beam", _edit(_BEAM, "if tok == eos_id:", "if tok == EOS_ID:")),
    # Ranks finished and unfinished hypotheses together by normalised score.
    "beam_ranks_all_together": ("ex6_beam", _edit(
        _BEAM, "best = sorted(finished, key=lambda h: -h.normalized) + sorted(live, key=lambda h: -h.normalized)",
        "best = sorted(finished + live, key=lambda h: -h.normalized)")),
    # Takes only the beam_size best candidates: a candidate ending in <eos> costs a live prefix.
    "beam_topk_only_beam_size": ("ex6_beam", _edit(
        _BEAM, "flat.topk(min(2 * beam_size, flat.numel()))", "flat.topk(min(beam_size, flat.numel()))")),
    # Issue 52: the shrinking beam of OpenNMT-style searches (a finished hypothesis takes a place, so fewer
    # prefixes stay live): a protocol the prompt now rules out and a visible check catches
    "beam_shrinks_with_finished": ("ex6_beam", '''def beam_search(step, state, max_len, beam_size=4, alpha=0.0, sos_id=SOS_ID, eos_id=EOS_ID):
    """A shrinking beam (finished hypotheses take places in the beam)."""
    prefixes, scores = [[]], torch.zeros(1)
    prev = torch.tensor([sos_id])
    finished = []
    for _ in range(max_len):
        width = beam_size - len(finished)
        if width <= 0 or not prefixes:
            prefixes = []
            break
        log_probs, state = step(prev, state)
        vocab = log_probs.shape[-1]
        flat = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_idx = flat.topk(min(width, flat.numel()))
        rows, toks, new_scores = [], [], []
        for s, i in zip(top_scores.tolist(), top_idx.tolist()):
            row, tok = divmod(i, vocab)
            if tok == eos_id:
                seq = prefixes[row] + [tok]
                finished.append(decoding.Hypothesis(seq, s, s / len(seq) ** alpha, True))
            else:
                rows.append(row); toks.append(tok); new_scores.append(s)
        if not rows:
            prefixes = []
            break
        prefixes = [prefixes[r] + [t] for r, t in zip(rows, toks)]
        state = decoding.index_state(state, torch.tensor(rows))
        scores, prev = torch.tensor(new_scores), torch.tensor(toks)
    live = [decoding.Hypothesis(p, s, s / len(p) ** alpha, False) for p, s in zip(prefixes, scores.tolist())]
    best = sorted(finished, key=lambda h: -h.normalized) + sorted(live, key=lambda h: -h.normalized)
    return best[:beam_size]
'''),
}
