"""Chapter 1 (seq2seq with RNNs): the declared domain of every exercise."""

from __future__ import annotations

from course_utils.data.vocab import EOS_ID, PAD_ID, SOS_ID
from course_utils.domains import CALL, Arg, Exercise, Kind
from course_utils.domains._kinds import BATCH1, BATCHED, F32, F64, MANY, ONE

__all__ = ["EXERCISES"]

CH = "ch01_seq2seq_rnn"

DEFAULT_IDS = Kind("default-ids", "the default ids", lambda b: (b["sos_id"], b["eos_id"]) == (SOS_ID, EOS_ID)
                   and b.get("pad_id", PAD_ID) == PAD_ID)
OTHER_IDS = Kind("other-ids", "other `sos_id`/`eos_id`/`pad_id` than the defaults",
                 lambda b: (b["sos_id"], b["eos_id"], b.get("pad_id", PAD_ID)) != (SOS_ID, EOS_ID, PAD_ID))

EXERCISES = (
    Exercise(CH, "ex1_rnn_forward", "rnn_forward", "course_utils.rnn:rnn_forward",
             (Arg("x", (F32, F64, BATCHED, BATCH1)),)),
    Exercise(CH, "ex2_decoder_io", "make_decoder_io", None, (Arg(CALL, (DEFAULT_IDS, OTHER_IDS)),)),
    Exercise(CH, "ex3_encode", "encode", None,
             (Arg("src", (BATCHED, BATCH1)),
              Arg(CALL, (Kind("padded", "sources of different lengths (some padded)",
                              lambda b: bool((b["src_lengths"] < b["src"].shape[1]).any())),)))),
    Exercise(CH, "ex4_decoder_step", "decoder_step", None, (Arg("prev_tokens", (BATCHED, BATCH1)),)),
    Exercise(CH, "ex5_greedy", "greedy_decode", "course_utils.decoding:greedy_decode",
             (Arg("max_len", (ONE, MANY)), Arg(CALL, (DEFAULT_IDS, OTHER_IDS)))),
    Exercise(CH, "ex6_beam", "beam_search", "course_utils.decoding:beam_search",
             (Arg("beam_size", (ONE, MANY)),
              Arg("alpha", (Kind("0", "0", lambda v: v == 0), Kind("fractional", "fractional (0.6)",
                                                                    lambda v: 0 < v < 1),
                            Kind("1", "1", lambda v: v == 1))),
              Arg(CALL, (DEFAULT_IDS, OTHER_IDS,
                         Kind("beam-1-alpha", "a beam of 1 with `alpha` > 0",
                              lambda b: b["beam_size"] == 1 and b["alpha"] > 0))))),
)
