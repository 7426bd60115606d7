"""The progress line of long launches: nothing before the delay, then programs, instructions and the
current kernel line on stderr; only on a terminal unless asked; cleared at the end."""

import io

import numpy as np

import opennki.legacy.language as nl
from opennki.errors import SourceLocation
from opennki.kernel import run_kernel
from opennki.sim import SimOptions
from opennki.sim import progress as progress_mod
from opennki.sim.progress import Progress, progress_for
from tests.isa.helpers import rand


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_nothing_is_drawn_before_the_delay_then_the_line_is_redrawn_at_most_every_interval():
    clock, out = Clock(), io.StringIO()
    p = Progress("k", 4, out, delay_s=2.0, interval_s=0.5, clock=clock)
    where = SourceLocation("/x/kern.py", 42, "k")
    for _ in range(10):
        p.instruction(where)
    assert out.getvalue() == ""
    clock.now += 2.0
    p.instruction(where)
    assert out.getvalue() == "\rk: programs 0/4, 11 instructions, kern.py:42"
    clock.now += 0.1
    p.program_done()
    p.instruction(where)
    assert out.getvalue().count("\r") == 1                  # within the interval: not redrawn
    clock.now += 0.5
    p.instruction(SourceLocation("/x/kern.py", 7, "k"))
    assert out.getvalue().endswith("\rk: programs 1/4, 13 instructions, kern.py:7 ")   # padded over the old
    p.close()
    assert out.getvalue().endswith("\r" + " " * len("k: programs 1/4, 13 instructions, kern.py:7") + "\r")


def test_auto_draws_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True
    assert progress_for(None, "k", 1, io.StringIO()) is None
    assert progress_for(None, "k", 1, Tty()) is not None
    assert progress_for(False, "k", 1, Tty()) is None
    assert progress_for(True, "k", 1, io.StringIO()) is not None


def grid_kernel(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.add(t, 1.0))
    return out


def test_a_launch_draws_its_programs_and_clears_the_line(rng, capsys, monkeypatch):
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    monkeypatch.setattr(progress_mod, "INTERVAL_S", 0.0)
    a = rand(rng, 32, 8)
    out = run_kernel(grid_kernel, (a,), options=SimOptions(progress=True), grid=(3,))
    np.testing.assert_array_equal(out, a + np.float32(1.0))
    err = capsys.readouterr().err
    assert "grid_kernel: programs 3/3, 9 instructions, test_progress.py:" in err
    assert err.endswith("\r")                                # cleared
    run_kernel(grid_kernel, (a,), grid=(3,))                  # auto: stderr is not a terminal here
    assert capsys.readouterr().err == ""
