"""The cost timeline's shortcuts give what walking every gap gives: `fit` and `spread` skip the walk when no
gap can be used (the last gap ends latest, since gaps stay disjoint and in order), on timelines built by
random sequences of reservations and spread transfers (each changes the timeline in place; `copy` keeps
one as it was)."""

from opennki.cost import timeline
from opennki.cost.timeline import MAX_GAPS, Timeline


def _random_timelines(rng, steps=400):
    line = Timeline()
    for i in range(steps):
        ready = float(rng.uniform(0, line.free + 50)) if rng.random() < 0.8 else line.free + float(rng.uniform(0, 30))
        duration = float(rng.choice([0.0, rng.uniform(0, 20), rng.uniform(0, 200)]))
        if rng.random() < 0.5:
            line.reserve(ready, duration, i)
        else:
            line.spread(ready, duration, i)
        yield line


def _state(line, method, *args):
    """The result of `line.method(*args)` on a copy of `line`, and the copy's state after it."""
    line = line.copy()
    result = getattr(line, method)(*args)
    return (line.free, line.gaps, line.last, *result)


def test_gaps_stay_disjoint_and_in_order(rng):
    for line in _random_timelines(rng):
        assert len(line.gaps) <= MAX_GAPS
        for (a0, a1), (b0, b1) in zip(line.gaps, line.gaps[1:]):
            assert a0 < a1 <= b0 < b1
        assert all(g1 <= line.free for _, g1 in line.gaps)


def test_fit_and_spread_equal_the_walk_over_every_gap(rng):
    shortcuts = 0
    for k, line in enumerate(_random_timelines(rng)):
        end = line.gaps[-1][1] if line.gaps else line.free
        for ready in (float(rng.uniform(0, line.free + 10)), end, end - 1e-10, float(rng.uniform(end, end + 10))):
            for duration in (0.0, float(rng.uniform(0, 50))):
                assert line.fit(ready, duration) == line._fit_in_gaps(ready, duration)
                assert _state(line, "spread", ready, duration, k) == _state(line, "_spread_over_gaps", ready,
                                                                           duration, k)
                shortcuts += not line.gaps or line.gaps[-1][1] - ready <= 1e-9
    assert shortcuts > 100


def test_a_transfer_ready_early_fills_the_gaps_it_meets():
    line = Timeline(100.0, ((10.0, 20.0), (40.0, 45.0)), 7)
    kept = line.copy()
    start, end, waited = line.spread(15.0, 12.0, 8)
    assert (start, end, waited) == (15.0, 102.0, -1)      # 5 ns in the first gap, 5 in the second, 2 at the end
    assert (line.gaps, line.free, line.last) == (((10.0, 15.0),), 102.0, 8)
    assert (kept.gaps, kept.free, kept.last) == (((10.0, 20.0), (40.0, 45.0)), 100.0, 7)


def test_take_where_fit_placed_equals_reserving_from_that_start(rng):
    """`take(start, duration, gap)` after `fit` (the Tensor Engine's backfill, which may lengthen the duration
    while it still ends in the gap) leaves the timeline `reserve(start, duration)` leaves."""
    taken = 0
    for k, line in enumerate(_random_timelines(rng)):
        for _ in range(3):
            ready = float(rng.uniform(0, line.free + 10))
            duration = float(rng.choice([0.0, rng.uniform(0, 20)]))
            start, gap = line.fit(ready, duration)
            if gap is None:
                continue
            longer = duration + float(rng.uniform(0, line.gaps[gap][1] - start - duration))
            for d in (duration, longer):
                took, kept = line.copy(), line.copy()
                took.take(start, d, gap)
                kept.reserve(start, d, k)
                assert (took.free, took.gaps, took.last) == (kept.free, kept.gaps, kept.last)
                taken += 1
    assert taken > 100


def _reserved_by_walk(line, ready, duration, record):
    """`reserve` by its definition: placed where the walk over every gap places it (`_fit_in_gaps`), taken
    from that gap, or appended at the end (the gap it leaves before it kept); the state after it."""
    line = line.copy()
    start, gap = line._fit_in_gaps(ready, duration)
    if gap is not None:
        line.take(start, duration, gap)
        return line.free, line.gaps, line.last, start, -1
    waited = line.last if line.free > ready else -1
    if start > line.free:
        line.gaps = (line.gaps + ((line.free, start),))[-MAX_GAPS:]
    line.free, line.last = start + duration, record
    return line.free, line.gaps, line.last, start, waited


def test_reserve_equals_the_walk_over_every_gap(rng):
    """`reserve` (which tests inline that no gap fits) leaves the timeline and gives the start and waited-for
    record the walk over every gap gives, in gaps, at the end, and just behind the last gap."""
    kinds = set()
    for k, line in enumerate(_random_timelines(rng)):
        end = line.gaps[-1][1] if line.gaps else line.free
        for ready in (float(rng.uniform(0, line.free + 10)), end, end - 1e-10, line.free,
                      float(rng.uniform(line.free, line.free + 10))):
            for duration in (0.0, float(rng.uniform(0, 50))):
                expected = _reserved_by_walk(line, ready, duration, k)
                assert _state(line, "reserve", ready, duration, k) == expected
                kinds.add((expected[1] != line.gaps, expected[4] != -1))
    assert kinds == {(True, False), (False, False), (False, True)}     # in a gap or leaving one; behind the last


def test_walks_started_after_the_gaps_that_end_by_ready_equal_walks_over_every_gap(rng, monkeypatch):
    """`_fit_in_gaps` and `_spread_over_gaps` start at the first gap that ends after `ready` (`SEARCHED_GAPS`, a
    binary search over the gaps' ends); walking every gap from the first (the plain path) gives the same
    placements and leaves the same timelines, for `ready` before, inside, between and exactly at the gaps'
    bounds (a gap ending at `ready`: `fit` walks it, `spread` keeps it)."""
    skipped = 0
    for k, line in enumerate(_random_timelines(rng)):
        if not line.gaps:
            continue
        bounds = [x for gap in line.gaps for x in gap]
        for ready in (float(rng.uniform(0, line.free + 10)), *rng.choice(bounds, 3), line.gaps[-1][1] - 1e-10):
            ready = float(ready)
            for duration in (0.0, float(rng.uniform(0, 5)), float(rng.uniform(0, 200))):
                searched = (line._fit_in_gaps(ready, duration), _state(line, "_spread_over_gaps", ready, duration, k))
                monkeypatch.setattr(timeline, "SEARCHED_GAPS", False)
                walked = (line._fit_in_gaps(ready, duration), _state(line, "_spread_over_gaps", ready, duration, k))
                monkeypatch.setattr(timeline, "SEARCHED_GAPS", True)
                assert searched == walked
                skipped += line.gaps[0][1] <= ready
    assert skipped > 500
