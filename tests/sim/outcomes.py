"""Comparing a fast path's outcome with the plain path's: the same outputs bit for bit, or the same error; and
the same events, field by field."""

import dataclasses
from typing import Callable

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


def event_fields(value, storage_id: Callable[[int], object], field_order: bool = False):
    """An event (or a part of one) as plain comparable values: dataclasses field by field, arrays by dtype, shape
    and bytes, containers element by element. Storage ids count up across launches, so each goes through
    `storage_id` (e.g. its order of first appearance, or its distance from the launch's first id). With
    `field_order` a dataclass also gives the order of its instance dict (records built from templates must keep
    the order the dataclass's own __init__ gives). Fields declared out of the value (`compare=False`: an event's
    `params_source`, which only a fast path may set) are left out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(storage_id(getattr(value, f.name)) if f.name == "storage_id"
                       else event_fields(getattr(value, f.name), storage_id, field_order)
                       for f in dataclasses.fields(value) if f.compare)
        return (type(value).__name__,) + fields + ((tuple(vars(value)),) if field_order else ())
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return tuple(event_fields(v, storage_id, field_order) for v in value)
    if isinstance(value, dict):
        return tuple((k, event_fields(v, storage_id, field_order)) for k, v in value.items())
    return value


def by_first_appearance() -> Callable[[int], int]:
    """A storage-id mapping for `event_fields`: each id becomes its order of first appearance."""
    ids: dict = {}
    return lambda sid: ids.setdefault(sid, len(ids))


def fast_and_plain(kernel, args, module, switch: str, setup=None, **launch) -> tuple[list, list]:
    """Run `kernel` (an undecorated kernel function) with `module.<switch>` True (the fast path), then False (the
    plain path), each with a Recorder: ([fast outcome, plain outcome], [fast events, plain events]), an outcome the
    outputs or the OpenNKIError raised, the events field by field (`event_fields`, storage ids by first
    appearance). `setup()` runs before each launch (clearing a memo); the switch is left True."""
    from opennki.errors import OpenNKIError
    from opennki.kernels.base import run_kernel
    from opennki.listeners import Recorder

    outcomes, events = [], []
    for fast in (True, False):
        setattr(module, switch, fast)
        if setup is not None:
            setup()
        rec = Recorder()
        try:
            outcomes.append(run_kernel(kernel, args, listeners=[rec], **launch))
        except OpenNKIError as e:
            outcomes.append(e)
        finally:
            setattr(module, switch, True)
        sid = by_first_appearance()
        events.append([event_fields(e, sid) for e in rec.events])
    return outcomes, events


def same_both_ways(kernel, args, module, switch: str, min_events: int, **launch):
    """`fast_and_plain`, asserting the same outputs or error and the same events (more than `min_events` of them,
    so that the comparison saw the kernel run); the outcome."""
    outcomes, events = fast_and_plain(kernel, args, module, switch, **launch)
    assert_same_outcome(*outcomes)
    assert len(events[0]) > min_events and events[0] == events[1]
    return outcomes[0]
