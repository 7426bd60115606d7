"""Cost layer: a resource timeline that can backfill idle gaps. Imports nothing from opennki.

DMA engines serve several queues round-robin, so a transfer that becomes ready early may run in a gap left
before a transfer that was placed earlier but had to wait (a store behind its compute); compute engines run
what the compiler's scheduler put there, so an instruction whose inputs are ready early can take an idle
stretch before instructions placed earlier. A `Timeline` keeps the end of its last reservation and the most
recent idle gaps before it: `reserve(ready, duration)` takes the earliest gap that fits, else appends (an
instruction); `spread(ready, duration)` fills the gaps it meets and continues at the end (a transfer's
bytes, interleaved with others'). Both change the timeline in place; the 16 DMA engines of a core share one
object while every transfer spans them all, and a transfer over some of them changes a `copy`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from operator import itemgetter

MAX_GAPS = 16
NO_PRODUCER = -1
# the walks over the gaps (`_fit_in_gaps`, `_spread_over_gaps`) start at the first gap that ends after `ready` (at
# or after, for `fit`), found by a binary search over the gaps' ends (in order, as the gaps are): an earlier one
# ends by `ready`, so the walk would find it too short and, spreading, keep it as it is; False: every walk
# starts at the first gap (the plain path)
SEARCHED_GAPS = True
_END = itemgetter(1)


class Timeline:
    __slots__ = ("free", "gaps", "last")

    def __init__(self, free: float = 0.0, gaps: tuple = (), last: int = NO_PRODUCER):
        self.free = free
        # ((start, end), ...) idle stretches before `free`, oldest first: disjoint and in order (both methods
        # keep them so), hence the last one ends latest and one comparison tells that none can be used
        self.gaps = gaps
        self.last = last          # the record that ends at `free`

    def fit(self, ready: float, duration: float) -> tuple[float, int | None]:
        """(start, gap index or None) of the earliest placement at or after `ready`."""
        gaps = self.gaps
        if not gaps or gaps[-1][1] - ready < duration:     # no gap fits (the last gap ends latest)
            return (self.free if self.free > ready else ready), None
        return self._fit_in_gaps(ready, duration)

    def _fit_in_gaps(self, ready: float, duration: float) -> tuple[float, int | None]:
        """`fit` walking the gaps (the plain path: every gap; one ending before `ready` leaves it less than no
        time, `g1 - ready < 0`, so with SEARCHED_GAPS the walk for a duration of no less than 0 starts after them)."""
        gaps = self.gaps
        for i in range(bisect_left(gaps, ready, key=_END) if SEARCHED_GAPS and duration >= 0.0 else 0, len(gaps)):
            g0, g1 = gaps[i]
            s = g0 if g0 > ready else ready
            if g1 - s >= duration:
                return s, i
        return (self.free if self.free > ready else ready), None

    def copy(self) -> "Timeline":
        return Timeline(self.free, self.gaps, self.last)

    def spread(self, ready: float, duration: float, record: int) -> tuple[float, float, int]:
        """(start, end, record it waited for) after reserving `duration` of work from `ready` on, split over the
        idle gaps it meets and the end: how a DMA engine serving its queues round-robin interleaves a
        transfer with others already placed."""
        gaps = self.gaps
        if not gaps or gaps[-1][1] - ready <= 1e-9:    # every gap ends by `ready`: none is used
            free = self.free
            if free > ready:
                waited = self.last
                self.free, self.last = free + duration, record
                return free, free + duration, waited
            if ready > free:
                self.gaps = (gaps + ((free, ready),))[-MAX_GAPS:]
            self.free, self.last = ready + duration, record
            return ready, ready + duration, NO_PRODUCER
        return self._spread_over_gaps(ready, duration, record)

    def _spread_over_gaps(self, ready: float, duration: float, record: int) -> tuple[float, float, int]:
        """`spread` walking the gaps (the plain path, which the shortcut for gaps all behind `ready` equals: every
        gap; one that ends by `ready` is kept as it is, `g1 - ready <= 0`, so with SEARCHED_GAPS those are kept
        at once and the walk starts after them)."""
        left, start = duration, None
        first = bisect_right(self.gaps, ready, key=_END) if SEARCHED_GAPS else 0
        gaps = list(self.gaps[:first])
        for i in range(first, len(self.gaps)):
            g0, g1 = self.gaps[i]
            s = g0 if g0 > ready else ready
            if g1 - s <= 1e-9:
                gaps.append((g0, g1))
                continue
            take = g1 - s if g1 - s < left else left       # min(left, g1 - s)
            start = s if start is None else start
            left -= take
            if s > g0:                                 # what is left of the gap on either side
                gaps.append((g0, s))
            if g1 > s + take:
                gaps.append((s + take, g1))
            if left <= 1e-9:
                gaps += self.gaps[i + 1:]
                self.gaps = tuple(gaps[-MAX_GAPS:])
                return start, s + take, NO_PRODUCER
        s = self.free if self.free > ready else ready
        waited = self.last if self.free > ready and start is None else NO_PRODUCER
        if s > self.free:
            gaps.append((self.free, s))
        start = s if start is None else start
        self.free, self.gaps, self.last = s + left, tuple(gaps[-MAX_GAPS:]), record
        return start, s + left, waited

    def reserve(self, ready: float, duration: float, record: int) -> tuple[float, int]:
        """(start, record it waited for) after reserving `duration` from `ready` on (where `fit` places it; its
        test that no gap fits inlined: most reservations append)."""
        gaps = self.gaps
        if gaps and not gaps[-1][1] - ready < duration:
            start, gap = self._fit_in_gaps(ready, duration)
            if gap is not None:
                self.take(start, duration, gap)
                return start, NO_PRODUCER
        free = self.free
        if free > ready:
            start, waited = free, self.last
        else:
            start, waited = ready, NO_PRODUCER
            if ready > free:
                self.gaps = (gaps + ((free, ready),))[-MAX_GAPS:]
        self.free, self.last = start + duration, record
        return start, waited

    def take(self, start: float, duration: float, gap: int) -> None:
        """Reserve `duration` from `start` in gap `gap`, where `fit` placed it (`reserve`, for a placement
        that was fitted already: from any ready time up to `start`, `fit` gives that gap and start again, since
        the earlier gaps did not fit from an earlier time)."""
        g0, g1 = self.gaps[gap]
        end = start + duration
        # what is left of the gap on either side
        if start > g0:
            pieces = ((g0, start), (end, g1)) if g1 > end else ((g0, start),)
        else:
            pieces = ((end, g1),) if g1 > end else ()
        self.gaps = (self.gaps[:gap] + pieces + self.gaps[gap + 1:])[-MAX_GAPS:]
