"""Shared code of the course "Attention, from Seq2Seq to Transformers".

Modules are organised by idea, so that a later chapter reuses what an earlier one taught:

- :mod:`course_utils.data` -- one module per task (vocab, batching, dates, sequences, images, toy_language, multitask), all re-exported
- :mod:`course_utils.rnn` -- the vanilla recurrence and the chapter-1 GRU encoder-decoder
- :mod:`course_utils.rnn_attention` -- Bahdanau and Luong attention for the RNN encoder-decoder (chapter 2)
- :mod:`course_utils.attention` -- scores, masks, scaled dot-product attention; cross-attention from projection matrices, sliding-window attention (mask and banded) (chapter 3)
- :mod:`course_utils.multihead` -- multi-head / grouped-query / multi-query attention, MHA -> GQA (chapter 4)
- :mod:`course_utils.kvcache` -- the key/value cache for decoding one token at a time, and a decoder's decoding state (``DecoderCache``) (chapter 4)
- :mod:`course_utils.cost` -- median time per call, bytes saved for backward, operations counted
- :mod:`course_utils.conv_attention` -- relative positions, the quadratic encoding, attention as convolution (chapter 5)
- :mod:`course_utils.positional` -- positional encodings: sinusoidal, learned, none; RoPE in both layouts (chapters 5, 6, 8)
- :mod:`course_utils.blocks` -- the one Transformer block (config, norms, feed-forwards, caches as arguments), the stack, the token embedding
- :mod:`course_utils.decoding` -- greedy decoding and beam search for any step function
- :mod:`course_utils.transformer` -- the encoder-decoder Transformer (``Seq2SeqConfig``), two stacks of blocks (chapter 6)
- :mod:`course_utils.train` -- seeding, device choice, the one training loop (``fit``, ``TrainConfig``, ``History``), the learning-rate schedules, decoding and scoring seq2seq models
- :mod:`course_utils.lengthtask` -- the length-graded comparison of chapters 1, 2 and 6 (budget, training, metrics)
- :mod:`course_utils.plots` -- loss curves, accuracy against length, attention heat maps
- :mod:`course_utils.diagrams` -- the chapters' diagrams, drawn by code
- :mod:`course_utils.checks` -- the learner-facing checks of the exercises
- :mod:`course_utils.records` -- what a check sends the grader while a notebook is autograded (the record format)
- :mod:`course_utils.budget` -- smaller experiments while nbgrader grades a notebook
- :mod:`course_utils.claims` -- an experiment's result stated with a bound from its spread over seeds and CPUs
- :mod:`course_utils.families` -- attention patterns (bidirectional, causal, prefix-LM), MLM corruption, the encoder-only model, the GPT-style decoder-only preset (chapter 7; prompts and sampling with temperature, top-k, top-p are in decoding)
- :mod:`course_utils.lm` -- the one decoder-only language model, GPT-style and LLaMA-style (``LMConfig.gpt``, ``LMConfig.llama``) (chapters 7, 8)
- :mod:`course_utils.vit` -- patches, the Vision Transformer, attention rollout (chapter 7)
- :mod:`course_utils.classify` -- image classification: a CNN baseline, training with augmentation, accuracy (chapter 7)
- :mod:`course_utils.llama` -- the LLaMA-style preset of ``lm`` and Hugging Face's Llama weights (chapter 8)
- :mod:`course_utils.flash` -- the online softmax and tiled attention (chapter 8)
- :mod:`course_utils.paged` -- a paged KV cache: block table, copy-on-write forks, memory of pages vs contiguous (chapter 9)
- :mod:`course_utils.rolling` -- sliding-window attention with a rolling-buffer cache, the banded causal mask, the receptive field (chapter 9)
- :mod:`course_utils.speculative` -- speculative decoding: the acceptance step, the expected tokens per step, a draft verified by the target (chapter 9)
- :mod:`course_utils.mla` -- multi-head latent attention: the latent cache, the absorbed form, KV bytes per token (chapter 9)
- :mod:`course_utils.kvquant` -- an int8 key/value cache with per-channel scales (chapter 9)
- :mod:`course_utils.textlm` -- the standard library's source as a byte corpus, the LM training of chapter 8

The grader is a package of its own, ``course_grading`` in ``grader/`` (grade, release, autograde
and execute notebooks with nbgrader, in a sandbox; docs/grader.md); no teaching module imports it,
and a learner's ``make lab`` does not install it.
"""

__version__ = "0.1.0"
