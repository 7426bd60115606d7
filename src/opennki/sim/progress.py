"""Simulator layer: a progress line for long launches, on stderr.

Imports nothing of opennki. `Simulator.launch` makes a `Progress` when `SimOptions.progress` asks for one (by default:
stderr is a terminal). The issue path calls `instruction(location)` after each instruction and the launch
calls `program_done()` after each program of the grid; nothing is drawn before `delay_s` (2 s) has passed,
so short launches print nothing, and then the line is redrawn at most every `interval_s`:

    attention_kernel: programs 3/16, 123,456 instructions, kernel.py:42

Decision: a line of our own rather than tqdm or rich. Neither is a dependency, the total instruction count is
unknown in advance (so their bars and rates would only show the program count, which this line has too), and
one carriage-return line needs no library. The line is cleared when the launch ends.
"""

from __future__ import annotations

import os
import sys
import time

DELAY_S = 2.0
INTERVAL_S = 0.25


class Progress:
    """The progress line of one launch (module docstring). `stream`: where to draw (a terminal)."""

    def __init__(self, kernel: str, programs: int, stream, *, delay_s: float | None = None,
                 interval_s: float | None = None, clock=time.monotonic):
        self.kernel = kernel
        self.programs = max(programs, 1)
        self.stream = stream
        self.clock = clock
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.done = 0
        self.instructions = 0
        self.location = None
        self.width = 0                  # characters of the line drawn last (0: nothing on screen)
        self._next = clock() + (DELAY_S if delay_s is None else delay_s)   # when a line may be drawn next

    def instruction(self, location) -> None:
        self.instructions += 1
        self.location = location
        if self.clock() >= self._next:
            self.draw()

    def program_done(self) -> None:
        self.done += 1
        if self.clock() >= self._next:
            self.draw()

    def line(self) -> str:
        where = f", {os.path.basename(self.location.filename)}:{self.location.lineno}" if self.location else ""
        return f"{self.kernel}: programs {self.done}/{self.programs}, {self.instructions:,} instructions{where}"

    def draw(self) -> None:
        text = self.line()
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)
        self._next = self.clock() + self.interval_s

    def close(self) -> None:
        """Clear the line (if one was drawn)."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def progress_for(option, kernel: str, programs: int, stream=None) -> Progress | None:
    """The Progress of a launch, or None: `option` True draws on `stream` (stderr) whatever it is, False
    never, None (auto) only when it is a terminal."""
    stream = stream if stream is not None else sys.stderr
    if option is False or stream is None:
        return None
    if option is None:
        isatty = getattr(stream, "isatty", None)
        if isatty is None or not isatty():
            return None
    return Progress(kernel, programs, stream)
