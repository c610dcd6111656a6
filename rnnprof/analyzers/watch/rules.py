"""The watch's rules: each judges a rank's recent steps (its last ``RECENT``) against its own rolling baseline (the
``BASELINE`` before them, its first ``SETTLE`` and any flagged step left out, at least ``MIN_BASELINE``) and jitter
(the larger of the baseline's ``noise.robust_spread`` and the spread of the medians of ``RECENT`` consecutive
baseline steps), never a fixed threshold. A difference is significant as ``noise.significance`` says (``K`` times
that jitter and its own spread) and must exceed the largest excursion of ``RECENT`` consecutive steps of the rank's
last ``SPIKE_HISTORY`` (``sustained``): a new level is one the rank has not had.

* regression: the step time; input stall: the data wait, against the step time's jitter; straggler: each rank's
  lateness (``rank_lateness``), with ``noise``'s least difference between processes;
* memory growth (``memory_growth``): a mean change a step beyond ``K`` times its standard error and ``MEMORY_FLOOR``
  of the memory in use; its onset by a level-then-line fit, its rate by Theil-Sen; each on the memory less what a
  window's flagged steps added (the detector's ``memory_less_windows``);
* spike (``spike``): one step beyond ``SPIKE_K`` times the jitter and twice the rank's largest excursion.

docs/commands/watch.md says each in full.
"""

from __future__ import annotations

import numpy as np

from rnnprof.analyzers.noise import CPU_RANK_FLOOR_US, CROSS_RANK_FLOOR_US, K, Significance, robust_spread, significance

RECENT = 8
BASELINE = 100
MIN_BASELINE = 50  # fewer steps of a rank's own (after SETTLE): nothing is judged, its history is too short
SETTLE = 10
MEMORY_WINDOW = 40
MEMORY_FLOOR = 0.01  # a rise over a span smaller than this share of the memory in use is no leak to call
SPIKE_K = 10.0
SPIKE_HISTORY = 1000  # steps of a rank's history whose excursions a spike or a new level must exceed
SPIKE_LEAST_HISTORY = 100  # a spike is judged against at least this many steps' excursions
US = 1e6  # the noise module judges microseconds


def level_jitter(baseline: np.ndarray, block: int = RECENT) -> float:
    """The robust spread of the medians of ``block`` consecutive values of ``baseline`` (0 with fewer than two
    blocks)."""
    blocks = len(baseline) // block
    if blocks < 2:
        return 0.0
    medians = np.median(baseline[len(baseline) - blocks * block:].reshape(blocks, block), axis=1)
    return robust_spread(medians)


def jitter(baseline: np.ndarray) -> float:
    return max(robust_spread(baseline), level_jitter(baseline))


def sustained(history: np.ndarray, level: float, block: int = RECENT) -> float:
    """The largest excursion above ``level`` of the median of ``block`` consecutive values of ``history`` (0 where
    none is above): the longest-lasting excursion the rank has had, that a new level must exceed."""
    blocks = len(history) // block
    if blocks < 1:
        return 0.0
    medians = np.median(history[len(history) - blocks * block:].reshape(blocks, block), axis=1)
    return max(0.0, float(medians.max()) - level)


def shift(recent: np.ndarray, baseline: np.ndarray, jitter_of: np.ndarray | None = None,
          floor_s: float = 0.0) -> Significance:
    """``recent`` against the median of ``baseline`` (seconds), judged against the jitter of ``jitter_of``
    (default: the baseline itself), in microseconds."""
    base = float(np.median(baseline))
    scale = jitter(baseline if jitter_of is None else jitter_of)
    return significance((recent - base) * US, scale * US, floor_us=floor_s * US)


def rank_lateness(waits: np.ndarray) -> np.ndarray:
    """``waits``: ranks x steps, each rank's collective wait; each rank's lateness: the median of the other ranks'
    waits less its own (ranks x steps)."""
    ranks = waits.shape[0]
    if ranks == 2:
        return np.array([waits[1] - waits[0], waits[0] - waits[1]])
    out = np.empty_like(waits)
    for r in range(ranks):
        others = np.delete(waits, r, axis=0)
        out[r] = np.median(others, axis=0) - waits[r]
    return out


def rank_floor_s(gpu: bool) -> float:
    """The least difference between processes that is called: ``noise``'s floors, in seconds."""
    return (CROSS_RANK_FLOOR_US if gpu else CPU_RANK_FLOOR_US) / US


def memory_growth(memory: np.ndarray) -> tuple[Significance, int] | None:
    """Whether ``memory`` (a rank's memory, a value a step, oldest first) grows over its last ``MEMORY_WINDOW``
    steps, or 4 or 16 times as many (a leak that allocates now and then shows over a longer span): (the judgement,
    the span) of the shortest span that grows, None where none does. Over a span, memory grows when its net rise a
    step, the mean of its step-to-step changes, exceeds ``K`` times the standard error of that mean (one jump, or a
    wandering level, does not) and ``MEMORY_FLOOR`` of the memory at the span's start spread over the span."""
    for span in (MEMORY_WINDOW, 4 * MEMORY_WINDOW, 16 * MEMORY_WINDOW):
        if span > len(memory):
            return None
        changes = np.diff(memory[-span:])
        rate = float(changes.mean())
        error = float(changes.std(ddof=1)) / np.sqrt(len(changes))
        threshold = max(K * error, MEMORY_FLOOR * float(memory[-span]) / len(changes))
        if rate > threshold:
            return Significance(rate, float(changes.std(ddof=1)), error, threshold, len(changes), True,
                                1.0 - threshold / rate, per="step"), span
    return None


def growth_onset(memory: np.ndarray, level_steps: int = MEMORY_WINDOW // 2) -> int:
    """Where ``memory`` starts to grow: the index that best splits it into a level, then a line (the least summed
    squared error of the two fits, from cumulative sums); 0 where it grows from its start. The level is that of
    the ``level_steps`` before the split: a jump long before the growth (a window's profiler, kept) does not pull
    the split back to it."""
    n = len(memory)
    if n < 4:
        return 0
    y = memory - memory[0]
    x = np.arange(n, dtype=np.float64)
    c1, cy, cyy = (np.concatenate([[0.0], np.cumsum(v)]) for v in (np.ones(n), y, y * y))
    cx, cxx, cxy = (np.concatenate([[0.0], np.cumsum(v)]) for v in (x, x * x, x * y))
    best, where = np.inf, 0
    for b in range(0, n - 2):
        a = max(0, b - level_steps)
        k, sy = c1[b] - c1[a], cy[b] - cy[a]
        flat = (cyy[b] - cyy[a]) - sy ** 2 / k if k else 0.0
        m, sx, sy = c1[n] - c1[b], cx[n] - cx[b], cy[n] - cy[b]
        sxx, sxy, syy = cxx[n] - cxx[b], cxy[n] - cxy[b], cyy[n] - cyy[b]
        var_x = sxx - sx * sx / m
        line = syy - sy * sy / m - ((sxy - sx * sy / m) ** 2 / var_x if var_x > 0 else 0.0)
        if flat + line < best:
            best, where = flat + line, b
    return where


def growth_rate(memory: np.ndarray) -> float:
    """The Theil-Sen slope of ``memory`` over its index: the median of the slopes between every two steps (bytes a
    step; 0 for fewer than two), which one jump in the middle (a window's profiler, kept) does not move."""
    n = len(memory)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, 1)
    return float(np.median((memory[j] - memory[i]) / (j - i)))


def spike(value: float, baseline: np.ndarray, excursions: np.ndarray) -> Significance | None:
    """Whether one step of ``value`` seconds is a spike (see the module): its excursion against the threshold,
    None when it is no spike. ``excursions``: the rank's recent steps' excursions above their baselines."""
    if len(excursions) < SPIKE_LEAST_HISTORY:
        return None
    base = float(np.median(baseline))
    scale = jitter(baseline)
    largest = float(excursions.max())
    threshold = max(SPIKE_K * scale, 2.0 * largest)
    excursion = value - base
    if excursion <= threshold or threshold <= 0:
        return None
    return Significance(excursion * US, 0.0, scale * US, threshold * US, 1, True, 1.0 - threshold / excursion,
                        per="step", jitter_k=SPIKE_K)
