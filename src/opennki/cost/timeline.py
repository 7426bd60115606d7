"""Cost layer: a resource timeline that can backfill idle gaps. Imports nothing from opennki.

DMA engines serve several queues round-robin, so a transfer that becomes ready early may run in a gap left
before a transfer that was placed earlier but had to wait (a store behind its compute). A `Timeline` keeps
the end of its last reservation and the most recent idle gaps before it; `reserve(ready, duration)` takes
the earliest gap that fits, else appends. Timelines are values shared copy-on-write: `reserved()` returns a
new timeline, so the 16 DMA engines of a core can share one object while every transfer spans them all.
"""

from __future__ import annotations

MAX_GAPS = 16
NO_PRODUCER = -1


class Timeline:
    __slots__ = ("free", "gaps", "last")

    def __init__(self, free: float = 0.0, gaps: tuple = (), last: int = NO_PRODUCER):
        self.free = free
        self.gaps = gaps          # ((start, end), ...) idle stretches before `free`, oldest first
        self.last = last          # the record that ends at `free`

    def fit(self, ready: float, duration: float) -> tuple[float, int | None]:
        """(start, gap index or None) of the earliest placement at or after `ready`."""
        for i, (g0, g1) in enumerate(self.gaps):
            s = g0 if g0 > ready else ready
            if g1 - s >= duration:
                return s, i
        return (self.free if self.free > ready else ready), None

    def reserved(self, ready: float, duration: float, record: int) -> tuple["Timeline", float, int]:
        """(new timeline, start, record it waited for) after reserving `duration` from `ready` on."""
        start, gap = self.fit(ready, duration)
        end = start + duration
        if gap is not None:
            g0, g1 = self.gaps[gap]
            pieces = tuple(p for p in ((g0, start), (end, g1)) if p[1] > p[0])
            gaps = self.gaps[:gap] + pieces + self.gaps[gap + 1:]
            return Timeline(self.free, gaps[-MAX_GAPS:], self.last), start, NO_PRODUCER
        waited = self.last if self.free > ready else NO_PRODUCER
        gaps = self.gaps + (((self.free, start),) if start > self.free else ())
        return Timeline(end, gaps[-MAX_GAPS:], record), start, waited
