"""Median and p95 of repeated measurements."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


# One line of the table: name, median, p95, unit (a single measurement fills both columns).
Row = tuple[str, float, float, str]


def single(name: str, value: float, unit: str) -> Row:
    return (name, value, value, unit)
