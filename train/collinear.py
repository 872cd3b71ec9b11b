"""AEPO's collinear test: do any three of N points lie on one line? (docs/algorithms.md, "AEPO: the adaptive
exploration reward".)

The released code tries every triple, O(N^3): 1,000 points took 14 s, and a policy that lists ever more points
makes the reward ever slower. This module decides the same question in O(N^2) (O(N^2 log N) with floats), with
the released answer: exact for integer triples (of any size), ``math.isclose`` for the others. Used by the AEPO
reward (``train.rewards``), the collapse monitors and the online actors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

__all__ = ["is_collinear"]


def is_collinear(points: Sequence[tuple[float, float]]) -> bool:
    """True if any three points lie on one line (N >= 3 only; a repeated point
    makes every triple containing it collinear). As in the released code, a
    triple of integer points is tested exactly (integers of any size) and any
    other with ``math.isclose`` on (y2 - y1)(x3 - x1) and (y3 - y1)(x2 - x1).

    O(N^2) directions instead of the O(N^3) triples the released code tries:
    the triple i < j < k is collinear when the directions from i to j and from
    i to k are parallel, so for each i only the directions to the later points
    are compared: exactly, by a set of directions reduced by their gcd, when all
    points are integers; otherwise by neighbours in slope order (directions
    parallel within the tolerance have slopes within it, so some two of them
    are neighbours), O(N^2 log N).
    """
    pts = [(x, y) for x, y in points]
    if len(pts) < 3:
        return False
    if len(set(pts)) < len(pts):
        return True
    if all(type(v) is int for p in pts for v in p):
        return _collinear_integers(pts)
    exact = [type(x) is int and type(y) is int for x, y in pts]
    try:
        for x, y in pts:
            float(x), float(y)
    except OverflowError:  # an integer beyond floats among floats: exact fractions instead
        keep = [i for i, (x, y) in enumerate(pts) if _finite(x) and _finite(y)]
        fractions = [(Fraction(pts[i][0]), Fraction(pts[i][1])) for i in keep]
        return _collinear_sorted(fractions, [exact[i] for i in keep], _fractions_close)
    return _collinear_sorted(pts, exact, math.isclose)


def _finite(v: Any) -> bool:
    """A number that a Fraction can hold: any int, a finite float (booleans are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or math.isfinite(v))


def _fractions_close(a: Fraction, b: Fraction) -> bool:
    """``math.isclose`` (relative 1e-9) computed exactly, for values too large for floats."""
    return abs(a - b) <= Fraction(1, 10**9) * max(abs(a), abs(b))


def _collinear_integers(pts: list[tuple[int, int]]) -> bool:
    gcd = math.gcd
    for i, (xi, yi) in enumerate(pts[:-2]):
        seen = set()
        for x, y in pts[i + 1:]:
            dx, dy = x - xi, y - yi
            g = gcd(dx, dy)  # > 0: the points are distinct
            dx, dy = dx // g, dy // g
            if dx < 0 or (dx == 0 and dy < 0):
                dx, dy = -dx, -dy
            if (dx, dy) in seen:
                return True
            seen.add((dx, dy))
    return False


def _collinear_sorted(pts: Sequence[tuple[Any, Any]], exact: Sequence[bool], close: Callable[[Any, Any], bool]
                      ) -> bool:
    """For each point, the directions to the later ones, turned into the half plane dx > 0 (or dx = 0,
    dy > 0) and sorted by slope; parallel ones are then neighbours. ``exact[i]``: point i has integer
    coordinates (a triple of those is compared exactly, as released)."""
    for i, (xi, yi) in enumerate(pts[:-2]):
        directions = []
        for j in range(i + 1, len(pts)):
            dx, dy = pts[j][0] - xi, pts[j][1] - yi
            if dx < 0 or (dx == 0 and dy < 0):
                dx, dy = -dx, -dy
            directions.append((dy / dx if dx else math.inf, dx, dy, exact[i] and exact[j]))
        directions.sort(key=lambda d: d[0])
        for (_, ax, ay, a_exact), (_, bx, by, b_exact) in zip(directions, directions[1:]):
            lhs, rhs = ay * bx, by * ax  # the released test with point i as (x1, y1)
            if lhs == rhs or (not (a_exact and b_exact) and close(lhs, rhs)):
                return True
    return False
