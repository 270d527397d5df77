"""Integers written as ranges, for lines a person or a model reads: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""

from __future__ import annotations

from collections.abc import Iterable


def number_ranges(values: Iterable[int]) -> str:
    runs: list[list[int]] = []
    for value in sorted(set(values)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
