"""Keyword ranking of documentation chunks: BM25 over tokens, identifiers split into their words.

``make_tiled_copy`` and ``TiledCopy`` are indexed as themselves and as ``make``, ``tiled``, ``copy``, so the
query "tiled copy" finds both, and the query ``make_tiled_copy`` prefers the entry of that exact name (a rare whole
token weighs more). A title's words count more than the body's, and a chunk whose title or text holds the query's
words in order (a phrase) ranks above one that only holds them apart. The entries of the ``first`` sources (the
cookbook) that hold every word of the query are listed before all others.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from core.docs.index import Chunk

K1 = 1.2
B = 0.75
TITLE_WEIGHT = 3  # a title word counts as this many body words
PHRASE_IN_TITLE = 1.0  # score multiplied by 1 + this when the title holds the query's words in order
PHRASE_IN_TEXT = 0.4
RERANKED = 100  # how many of the best BM25 scores are checked for phrases
PHRASE_SCAN_CHARS = 20_000

_WORD = re.compile(r"[A-Za-z0-9_]+")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i if in into is it its of on or so that the then "
    "there these this to was what when where which while with".split())


def _stem(word: str) -> str:
    """A light plural strip, so "streams" meets "stream"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def word_parts(word: str) -> list[str]:
    """The words of an identifier, lower case: ``make_tiled_copy`` and ``makeTiledCopy`` give make, tiled, copy."""
    return [p.lower() for piece in word.split("_") for p in _PARTS.findall(piece)]


@functools.lru_cache(maxsize=1 << 17)
def _word_tokens(word: str) -> tuple[str, ...]:
    """One identifier's tokens (cached: headers and sources repeat their identifiers many times)."""
    parts = word_parts(word)
    whole = (word.lower().strip("_"),) if len(parts) > 1 else ()
    return whole + tuple(_stem(p) for p in parts if p not in STOPWORDS)


def tokens(text: str) -> list[str]:
    """Search tokens of ``text``: the words of each identifier, lower case and without plurals, and the whole
    identifier too when it has several words."""
    found: list[str] = []
    for word in _WORD.findall(text):
        found += _word_tokens(word)
    return found


def phrase_text(text: str) -> str:
    """``text`` as its words (identifiers split) separated by single spaces, for finding a query's words in
    order."""
    return " " + " ".join(_stem(p) for word in _WORD.findall(text) for p in word_parts(word)
                          if p not in STOPWORDS) + " "


@dataclass(frozen=True)
class Bm25:
    chunks: tuple[Chunk, ...]
    postings: Mapping[str, tuple[tuple[int, int], ...]]  # token -> (chunk index, term frequency)
    lengths: tuple[int, ...]
    average_length: float


def build_bm25(chunks: tuple[Chunk, ...]) -> Bm25:
    postings: dict[str, list[tuple[int, int]]] = {}
    lengths = []
    for i, chunk in enumerate(chunks):
        counts = Counter(tokens(chunk.text))
        for token in tokens(chunk.title):
            counts[token] += TITLE_WEIGHT
        lengths.append(sum(counts.values()))
        for token, count in counts.items():
            postings.setdefault(token, []).append((i, count))
    average = sum(lengths) / len(lengths) if lengths else 1.0
    return Bm25(chunks, {t: tuple(p) for t, p in postings.items()}, tuple(lengths), max(average, 1.0))


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float
    snippet: str


def rank(index: Bm25, query: str, *, sources: frozenset[str] | None = None, limit: int = 8,
         first: frozenset[str] = frozenset()) -> tuple[list[Hit], int]:
    """The best ``limit`` chunks for ``query`` (from ``sources`` only, when given), and how many matched at all;
    a chunk of a ``first`` source holding every token of the query ranks above every chunk that is not one."""
    wanted = list(dict.fromkeys(tokens(query)))
    n = len(index.chunks)
    phrase = phrase_text(query)
    phrase_words = set(phrase.split())
    scores: dict[int, float] = {}
    has_phrase_words: Counter[int] = Counter()  # how many of the phrase's distinct words each chunk holds
    has_tokens: Counter[int] = Counter()  # how many of the query's distinct tokens each chunk holds
    for token in wanted:
        posting = index.postings.get(token, ())
        if not posting:
            continue
        idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
        for i, tf in posting:
            if sources is not None and index.chunks[i].source not in sources:
                continue
            norm = K1 * (1 - B + B * index.lengths[i] / index.average_length)
            scores[i] = scores.get(i, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
            has_tokens[i] += 1
            if token in phrase_words:
                has_phrase_words[i] += 1
    ahead = {i for i in scores if index.chunks[i].source in first and has_tokens[i] == len(wanted)}
    best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:max(RERANKED, limit)]
    best += [(i, scores[i]) for i in sorted(ahead - {i for i, _ in best})]
    if len(phrase_words) > 1:
        boosted = []
        for i, score in best:
            chunk = index.chunks[i]
            if has_phrase_words[i] < len(phrase_words):
                pass  # cannot hold the phrase
            elif phrase in phrase_text(chunk.title):
                score *= 1 + PHRASE_IN_TITLE
            elif phrase in phrase_text(chunk.text[:PHRASE_SCAN_CHARS]):
                score *= 1 + PHRASE_IN_TEXT
            boosted.append((i, score))
        best = boosted
    best = sorted(best, key=lambda item: (item[0] not in ahead, -item[1], item[0]))
    hits = [Hit(index.chunks[i], score, snippet(index.chunks[i].text, wanted)) for i, score in best[:limit]]
    return hits, len(scores)


def snippet(text: str, wanted: list[str], limit: int = 220) -> str:
    """The line of ``text`` holding the most query tokens (the first such, after a heading or signature), with
    what follows it, on one line and at most ``limit`` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    wanted_set = set(wanted)
    body = lines[1:] or lines
    scored = [(len(wanted_set & set(tokens(line))), -k) for k, line in enumerate(body)]
    best = -max(scored)[1]
    joined = " ".join(body[best:best + 4])
    joined = " ".join(joined.split())
    return joined if len(joined) <= limit else joined[:limit - 3].rstrip() + "..."
