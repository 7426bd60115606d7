"""Checks: every bug-finding check at once, for a script (`opennki check`) or a test (`--nki-check`).

Imports the lint and listeners.findings. `checking()` is the block both use: inside it every launch runs
with the race checker attached and uninitialised reads tracked (as with `detect_races=True` and
`uninitialized="raise"`, whatever the kernel's options say, so kernels need no change), findings are
collected instead of raised, and when the block ends each kernel function that was launched is linted
(`checks.lint`) at the release its options selected. The result is one list of `Finding`s, each bug once.
"""

from __future__ import annotations

import contextlib

from opennki.checks.lint import lint
from opennki.listeners.findings import Collected, collecting, format_findings, unique


@contextlib.contextmanager
def checking():
    """Run the block with every check on; yields the list the findings go to (module docstring)."""
    found = Collected(all_checks=True)
    try:
        with collecting(found):
            yield found
    finally:
        for fn, (generation, options) in list(found.kernels.items()):
            found.extend(lint(fn, generation, options))
        found[:] = unique(found)


__all__ = ["checking", "lint", "format_findings"]
