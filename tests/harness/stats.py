"""Statistics for the sampling tests."""

from __future__ import annotations

import math


def chi_square_p_value(observed: list[int], expected: list[float]) -> float:
    """Upper tail of the chi-square statistic (Wilson-Hilferty approximation; fine for df >= 10)."""
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True) if e > 0)
    df = sum(1 for e in expected if e > 0) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))
