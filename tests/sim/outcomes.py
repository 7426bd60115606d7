"""Comparing a fast path's outcome with the plain path's: the same outputs bit for bit, or the same error."""

import numpy as np


def assert_same_outcome(fast, plain) -> None:
    """`fast` and `plain` are a kernel's outputs (an array or a tuple of them) or the OpenNKIError it raised:
    the same dtypes, shapes and bits; or the same error class, text, kernel line and code."""
    if isinstance(plain, BaseException):
        assert type(fast) is type(plain), (fast, plain)
        assert str(fast) == str(plain)
        assert (fast.location.filename, fast.location.lineno) == (plain.location.filename, plain.location.lineno)
        assert getattr(fast, "code", None) == getattr(plain, "code", None)
        return
    assert not isinstance(fast, BaseException), fast
    fast, plain = (fast, plain) if isinstance(plain, tuple) else ((fast,), (plain,))
    for got, want in zip(fast, plain, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
