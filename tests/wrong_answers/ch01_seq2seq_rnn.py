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
    # Hands the work to the reference: right values, but not the learner's recurrence.
    "ex1_rnn_forward": '''def rnn_forward(x, h0, W_xh, W_hh, b_h):
    return rnn.rnn_forward(x, h0, W_xh, W_hh, b_h)
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
