"""`raises_at`: pytest.raises for opennki errors that also checks the kernel line.

Every OpenNKIError names the user's line (STYLE.md §5): its `location` is a frame outside the opennki
package, and when it crossed a front door (a kernel call) the traceback's last frame is that same line.
`raises_at(error, match=..., line=...)` asserts the error class and message like pytest.raises, then these,
and, with `line`, that the located source line contains that text (the kernel statement at fault).
"""

from __future__ import annotations

import contextlib
import traceback

import pytest

from opennki.errors import OpenNKIError, is_internal


def check_kernel_line(error: BaseException, line: str | None = None, *, code: str | None = None) -> None:
    """The checks of `raises_at` on an error already caught (an opennki error, or the plain built-in NKI
    raises for its fault, which carries the opennki error as `opennki_error`: errors.public_error)."""
    inner = getattr(error, "opennki_error", error)
    assert isinstance(inner, OpenNKIError), f"not an opennki error: {type(error).__name__}: {error}"
    loc = error.location
    assert loc is not None, f"the error names no kernel line: {error}"
    assert not is_internal(loc.filename), f"the error is located inside opennki: {loc.filename}:{loc.lineno}"
    if line is not None:
        assert line in loc.source, f"error at {loc} ({loc.source!r}), expected the line {line!r}"
    if code is not None:
        assert inner.code == code, (inner.code, code)
    frames = traceback.extract_tb(error.__traceback__)
    if frames and not is_internal(frames[-1].filename):     # through a front door: internal frames hidden
        last = frames[-1]
        assert (last.filename, last.lineno) == (loc.filename, loc.lineno), \
            f"the traceback ends at {last.filename}:{last.lineno}, the error names {loc}"
    elif frames:        # a direct call into opennki: the located line is the call on the traceback
        assert any((f.filename, f.lineno) == (loc.filename, loc.lineno) for f in frames), \
            f"the error names {loc}, which is not on the traceback"


@contextlib.contextmanager
def raises_at(error, *, match: str | None = None, line: str | None = None, code: str | None = None):
    """pytest.raises(error, match=match) that also checks the kernel line (module docstring)."""
    with pytest.raises(error, match=match) as info:
        yield info
    check_kernel_line(info.value, line, code=code)
