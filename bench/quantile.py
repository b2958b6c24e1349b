"""Quantiles for the benchmark tables: the nearest-rank method, one definition for every script.

With few samples the high quantiles are the maximum (p99 of 10 failovers is the worst one).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["nearest_rank"]


def nearest_rank(samples: list[Any], q: float) -> Any:
    """The ``q``-quantile of ``samples`` (0 < q <= 1) by the nearest-rank method."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
