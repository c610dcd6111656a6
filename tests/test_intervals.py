import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rnnprof.analyzers.intervals import merge, overlap_length, sweep_segments, union_length

# Integer endpoints on a small grid: brute force can then count covered unit cells exactly.
GRID = 40
interval = st.tuples(st.integers(0, GRID), st.integers(0, GRID)).map(lambda p: (min(p), max(p)))
labelled = st.lists(st.tuples(interval, st.integers(0, 2), st.integers(0, 2)), max_size=25)


def cells(intervals):
    covered = np.zeros(GRID, dtype=bool)
    for start, end in intervals:
        covered[start:end] = True
    return covered


@given(st.lists(interval, max_size=30))
def test_merge_and_union_match_brute_force(intervals):
    starts = np.array([s for s, _ in intervals], dtype=float)
    ends = np.array([e for _, e in intervals], dtype=float)
    merged_starts, merged_ends = merge(starts, ends)
    assert union_length(starts, ends) == cells(intervals).sum()
    # Merged intervals are sorted, disjoint, non-touching, and cover exactly the same cells.
    assert np.all(merged_ends > merged_starts)
    assert np.all(merged_starts[1:] > merged_ends[:-1])
    assert np.array_equal(cells(zip(merged_starts.astype(int), merged_ends.astype(int))), cells(intervals))


@given(st.lists(interval, max_size=20), st.lists(interval, max_size=20))
def test_overlap_matches_brute_force(a, b):
    def arrays(intervals):
        return (np.array([s for s, _ in intervals], dtype=float), np.array([e for _, e in intervals], dtype=float))

    assert overlap_length(arrays(a), arrays(b)) == (cells(a) & cells(b)).sum()


@settings(max_examples=150)
@given(labelled)
def test_grouped_layered_sweep_matches_brute_force(events):
    n_groups, n_layers = 3, 3
    starts = np.array([iv[0] for iv, _, _ in events], dtype=float)
    ends = np.array([iv[1] for iv, _, _ in events], dtype=float)
    groups = np.array([g for _, g, _ in events], dtype=np.int64)
    layers = np.array([k for _, _, k in events], dtype=np.int64)
    result = sweep_segments(starts, ends, groups=groups, n_groups=n_groups, layers=layers, n_layers=n_layers)
    for g in range(n_groups):
        per_layer = [cells([iv for iv, gg, k in events if gg == g and k == layer]) for layer in range(n_layers)]
        assert result.union()[g] == np.logical_or.reduce(per_layer).sum()
        for layer in range(n_layers):
            assert result.union([layer])[g] == per_layer[layer].sum()
        assert result.overlap([0], [1, 2])[g] == (per_layer[0] & (per_layer[1] | per_layer[2])).sum()
        nonempty = [iv for iv, gg, _ in events if gg == g and iv[1] > iv[0]]
        if nonempty:
            assert result.start[g] == min(s for s, _ in nonempty)
            assert result.end[g] == max(e for _, e in nonempty)
            assert result.span[g] == result.end[g] - result.start[g]
        else:
            assert np.isnan(result.start[g]) and result.span[g] == 0


def test_float_intervals_and_touching_edges():
    # Touching intervals merge into one but do not overlap each other.
    starts, ends = np.array([0.5, 1.25, 3.0]), np.array([1.25, 2.0, 3.0])
    assert union_length(starts, ends) == 1.5
    merged = merge(starts, ends)
    assert merged[0].tolist() == [0.5] and merged[1].tolist() == [2.0]
    assert overlap_length((np.array([0.0]), np.array([1.0])), (np.array([1.0]), np.array([2.0]))) == 0.0


def test_empty_input():
    result = sweep_segments(np.array([]), np.array([]), n_groups=2, n_layers=2)
    assert result.union().tolist() == [0.0, 0.0]
    assert result.overlap([0], [1]).tolist() == [0.0, 0.0]
    assert union_length(np.array([]), np.array([])) == 0.0


def test_subtract_cuts_each_interval_by_the_union_of_the_cuts():
    from rnnprof.analyzers.intervals import subtract

    starts, ends, origin = subtract([0, 10, 20, 50, 3], [30, 12, 25, 60, 4], [5, 11, 22, 40, 6], [8, 15, 28, 45, 7])
    pieces = sorted(zip(origin.tolist(), starts.tolist(), ends.tolist()))
    # [0,30) minus [5,8) [11,15) [22,28); [10,12) minus [11,15); [20,25) minus [22,28); [50,60) and [3,4) untouched
    assert pieces == [(0, 0, 5), (0, 8, 11), (0, 15, 22), (0, 28, 30), (1, 10, 11), (2, 20, 22), (3, 50, 60),
                      (4, 3, 4)]
    starts, ends, origin = subtract([0, 3], [10, 4], [0], [10])  # wholly inside a cut: nothing left
    assert len(starts) == len(ends) == len(origin) == 0
    starts, ends, origin = subtract([1.5], [2.5], [], [])
    assert (starts.tolist(), ends.tolist(), origin.tolist()) == ([1.5], [2.5], [0])
