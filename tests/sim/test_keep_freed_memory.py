"""`sim.arrays.KEEP_FREED_MEMORY`: the first value launch fixes glibc malloc's mmap and trim thresholds, so tiles made
and dropped in every iteration keep their pages. The setting lasts for the process, so each side runs in a fresh
interpreter: the outputs bit for bit, the error with its kernel line, and every event field by field are the same
with it off (malloc's own thresholds, the plain path) and on."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

_CHILD = r"""
import hashlib, sys
import numpy as np
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
import opennki.sim.arrays as arrays
from opennki.errors import OpenNKIError
from opennki.kernels.base import run_kernel
from opennki.listeners import Recorder
from tests.sim.outcomes import by_first_appearance, event_fields

arrays.KEEP_FREED_MEMORY = sys.argv[1] == "on"


def tiled(lhsT, rhs, overrun):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // 128):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128 + overrun):
                a = nl.load(lhsT[k * 128:(k + 1) * 128, m * 128:(m + 1) * 128])
                b = nl.load(rhs[k * 128:(k + 1) * 128, n * 512:(n + 1) * 512])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * 128:(m + 1) * 128, n * 512:(n + 1) * 512], value=nl.copy(acc, dtype=out.dtype))
    return out


rng = np.random.default_rng(7)
lhsT = rng.standard_normal((512, 256), dtype=np.float32)
rhs = rng.standard_normal((512, 1024), dtype=np.float32)
for overrun in (0, 1):
    rec = Recorder()
    try:
        outcome = run_kernel(tiled, (lhsT, rhs, overrun), listeners=[rec]).tobytes()
    except OpenNKIError as e:
        outcome = repr((type(e).__name__, str(e), e.location)).encode()
    sid = by_first_appearance()
    events = repr([event_fields(e, sid) for e in rec.events]).encode()
    print(overrun, hashlib.sha256(outcome).hexdigest(), hashlib.sha256(events).hexdigest(), len(rec.events),
          outcome[:300] if overrun else "")
"""


def _run(switch: str) -> str:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    done = subprocess.run([sys.executable, "-c", _CHILD, switch], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_kept_freed_memory_gives_the_plain_path_values_errors_and_events():
    plain, fast = _run("off"), _run("on")
    assert plain == fast
    lines = plain.splitlines()
    assert len(lines) == 2 and int(lines[0].split()[3]) > 50
    assert "Error" in lines[1]          # the overrun's load past the end raised, with its kernel line
