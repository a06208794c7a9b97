"""Figures of a simulation run: percentiles and the GPU allocation ratio over virtual time."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class AllocationTimeline:
    """The cluster's allocated milli-GPU as a step function of virtual time (seconds).

    ``record(t, allocated)`` is called after every change; :meth:`mean` is the time-weighted
    mean ratio over a window and :meth:`series` samples the ratio at fixed steps.
    """

    def __init__(self, capacity_milli: int) -> None:
        self.capacity = capacity_milli
        self._times: list[float] = []
        self._values: list[int] = []

    def record(self, t: float, allocated_milli: int) -> None:
        """The allocation is ``allocated_milli`` from ``t`` on."""
        if self._times and self._times[-1] == t:
            self._values[-1] = allocated_milli
        else:
            self._times.append(t)
            self._values.append(allocated_milli)

    def at(self, t: float) -> int:
        """Allocated milli-GPU at time ``t``."""
        k = bisect_right(self._times, t) - 1
        return self._values[k] if k >= 0 else 0

    def mean(self, start: float, end: float) -> float:
        """Time-weighted mean allocation ratio over ``[start, end]`` (0 for an empty window)."""
        if end <= start or not self.capacity:
            return 0.0
        area = 0.0
        t_prev, v_prev = start, self.at(start)
        for t, v in zip(self._times, self._values, strict=True):
            if t <= start:
                continue
            if t >= end:
                break
            area += v_prev * (t - t_prev)
            t_prev, v_prev = t, v
        area += v_prev * (end - t_prev)
        return area / ((end - start) * self.capacity)

    def series(self, start: float, end: float, step: float) -> list[float]:
        """The allocation ratio sampled at ``start, start + step, …`` up to ``end``."""
        if step <= 0 or end < start or not self.capacity:
            return []
        count = int((end - start) // step) + 1
        return [round(self.at(start + k * step) / self.capacity, 4) for k in range(count)]
