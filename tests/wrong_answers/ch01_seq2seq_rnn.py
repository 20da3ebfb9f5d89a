"""A typical mistake for chapter 1's exercise 2: no offset at all.

Both decoder input and target are the full [<sos>, y..., <eos>] sequence, so the decoder would
be asked to predict the token it is given.
"""

EXERCISE = "ex2_decoder_io"
SOURCE = '''def make_decoder_io(targets, sos_id=SOS_ID, eos_id=EOS_ID, pad_id=PAD_ID):
    seqs = [[sos_id, *t, eos_id] for t in targets]
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for b, s in enumerate(seqs):
        out[b, : len(s)] = torch.tensor(s)
    return out, out
'''
