"""Listeners layer: observers of the simulator's event stream. Imports events (and hw) only.

A listener is any object with `on_event(event)`; it keeps what it needs and offers a `report()`. Listeners
never change results: they receive frozen events that hold no live state. A listener may also offer
`on_program_event(event)`, taking the events a running program emits (its instructions, allocations, frees and
loop iterations; never a launch's or a program's start or end): a program that has it as its only listener
calls that instead of `on_event` (the cost model's skips a test for launches). A listener that ignores loop
events may say so by a false `loop_events` attribute: when no listener takes them, loops emit none (the cost
model's: `LoopStarted`, `LoopIteration` and `LoopFinished` cost nothing, and a blocked matmul runs more loop
iterations than instructions).
"""

from __future__ import annotations

from typing import Protocol

from opennki.events import Event


class Listener(Protocol):
    def on_event(self, event: Event) -> None: ...


class Recorder:
    """Keeps every event, in order (useful in tests and for ad-hoc analysis)."""

    def __init__(self):
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of_type(self, cls) -> list:
        return [e for e in self.events if isinstance(e, cls)]

    def report(self) -> list[Event]:
        return list(self.events)


__all__ = ["Listener", "Recorder"]
