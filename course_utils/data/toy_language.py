"""A toy language for masked and causal language modelling (chapter 7).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .._validate import check_int
from .vocab import Vocab

__all__ = ["CLS", "MASK", "TOY_FIRST_WORD_ID", "TOY_NEGATIVE", "TOY_NOUNS", "TOY_POSITIVE", "make_toy_sentences", "toy_grammatical", "toy_language_vocab", "toy_sentiment"]


CLS, MASK = "[CLS]", "[MASK]"
#: Adjectives of the toy language by polarity (a sentence never mixes the two).
TOY_POSITIVE = ("happy", "kind", "calm", "brave", "bright", "gentle", "clever", "warm")
TOY_NEGATIVE = ("sad", "cruel", "angry", "lazy", "dull", "rude", "cold", "mean")
TOY_NOUNS = ("cat", "dog", "bird", "horse", "frog", "owl", "bear", "duck")
_TOY_DETS = {False: ("a", "this", "the"), True: ("some", "these", "the")}   # singular, plural


def toy_language_vocab() -> Vocab:
    """The toy language's vocabulary: the four specials, ``[CLS]`` = 4, ``[MASK]`` = 5, then the
    words in sorted order (ids from :data:`TOY_FIRST_WORD_ID`)."""
    words = {".", "and", "not", "very", "is", "are", *TOY_POSITIVE, *TOY_NEGATIVE, *TOY_NOUNS,
             *(n + "s" for n in TOY_NOUNS), *_TOY_DETS[False], *_TOY_DETS[True]}
    return Vocab([CLS, MASK, *sorted(words)])


#: The first id of a word (not a special token, ``[CLS]`` or ``[MASK]``) in :func:`toy_language_vocab`.
TOY_FIRST_WORD_ID = 6


def make_toy_sentences(n: int, seed: int = 0, p_not: float = 0.5, max_adjectives: int = 3,
                       adjectives: Sequence[str] | None = None) -> list[tuple[list[str], int]]:
    """``n`` sentences of a toy language with a sentiment label, ``(words, label)``.

    The grammar: ``det noun copula ["not"] ["very"] adj {"and" ["very"] adj} "."`` where

    * the determiner, the noun and the copula agree in number ("a cat is", "some cats are");
    * 1 to ``max_adjectives`` adjectives, all of the same polarity (:data:`TOY_POSITIVE` or
      :data:`TOY_NEGATIVE`), drawn from ``adjectives`` if given (e.g. to keep some unseen);
    * "not" (with probability ``p_not``) flips the meaning.

    ``label`` is 1 when the sentence says something positive: positive adjectives without "not",
    or negative ones with it. Masked language modelling can learn agreement, which adjectives go
    together (and therefore their polarity) and where "not" may stand, without any label.
    """
    check_int(n, "n")
    if max_adjectives < 1:
        raise ValueError(f"max_adjectives must be >= 1, got {max_adjectives}")
    pools = {1: list(TOY_POSITIVE), 0: list(TOY_NEGATIVE)}
    if adjectives is not None:
        unknown = set(adjectives) - set(TOY_POSITIVE) - set(TOY_NEGATIVE)
        if unknown:
            raise ValueError(f"unknown adjectives {sorted(unknown)}; choose from TOY_POSITIVE and TOY_NEGATIVE")
        pools = {pol: [a for a in pool if a in adjectives] for pol, pool in pools.items()}
    polarities = [pol for pol, pool in pools.items() if pool]
    if not polarities:
        raise ValueError("adjectives is empty")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        plural = rng.random() < 0.5
        noun = rng.choice(TOY_NOUNS) + ("s" if plural else "")
        words = [rng.choice(_TOY_DETS[plural]), noun, "are" if plural else "is"]
        negated = rng.random() < p_not
        if negated:
            words.append("not")
        polarity = rng.choice(sorted(polarities))
        for i in range(rng.randint(1, max_adjectives)):
            if i:
                words.append("and")
            if rng.random() < 0.25:
                words.append("very")
            words.append(rng.choice(pools[polarity]))
        words.append(".")
        out.append((words, int(polarity != negated)))
    return out


def toy_sentiment(words: Sequence[str]) -> int | None:
    """The label of a toy sentence (1 positive, 0 negative), or ``None`` if it is not grammatical."""
    if not toy_grammatical(words):
        return None
    positive = any(w in TOY_POSITIVE for w in words)      # a grammatical sentence has one polarity
    return int(positive != (words[3] == "not"))


def toy_grammatical(words: Sequence[str]) -> bool:
    """Whether ``words`` is a sentence of :func:`make_toy_sentences`'s grammar (agreement in
    number, one polarity, "and" between adjectives, at most one "very" before each, a final ".";
    any number of adjectives). Used to score what a language model generates."""
    words = list(words)
    if len(words) < 5 or words[-1] != ".":
        return False
    det, noun, copula = words[:3]
    plural = noun.endswith("s") and noun[:-1] in TOY_NOUNS
    if not (plural or noun in TOY_NOUNS) or det not in _TOY_DETS[plural] or copula != ("are" if plural else "is"):
        return False
    rest = words[4:-1] if words[3] == "not" else words[3:-1]
    groups, current = [], []
    for w in rest:           # split the adjective phrase at "and"
        if w == "and":
            groups.append(current)
            current = []
        else:
            current.append(w)
    groups.append(current)
    adjs = []
    for g in groups:
        if len(g) == 2 and g[0] == "very":
            g = g[1:]
        if len(g) != 1 or g[0] not in TOY_POSITIVE + TOY_NEGATIVE:
            return False
        adjs.append(g[0])
    return all(a in TOY_POSITIVE for a in adjs) or all(a in TOY_NEGATIVE for a in adjs)
