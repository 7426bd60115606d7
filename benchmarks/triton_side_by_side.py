"""opennki's simulator next to the Triton interpreter (TRITON_INTERPRET=1) on the same three jobs.

Optional, not part of CI: it needs `triton` and `torch` importable beside opennki (a separate environment is
fine: `pip install torch triton` and this checkout). Each job is written twice, in the style of each tool,
doing the same math on the same fp32 data:

- vector add of 2^20 elements: opennki tiles it as [128, 2048] tiles of a [128, 8192] view; Triton runs
  programs of 4096 elements;
- matmul 1024^3: opennki's bundled tiled kernel (examples/tiled_matmul.py: 128 x 128 x 512 tiles, PSUM
  accumulation); Triton's blocked
  tl.dot kernel with 128 x 128 x 128 blocks;
- row softmax of [4096, 1024]: opennki 128 rows a tile; Triton one row a program.

Both sides are checked against NumPy before they are timed. Figures are CPU seconds (the best of a few
repeats, one BLAS thread); the ratio is Triton's time over opennki's (the speed target asks for >= 100).
`--json FILE` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ["TRITON_INTERPRET"] = "1"              # before triton is imported

import numpy as np  # noqa: E402

import opennki.legacy as nki  # noqa: E402
import opennki.legacy.language as nl  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.sim_speed import best_of  # noqa: E402
from examples.tiled_matmul import tiled_matmul  # noqa: E402

try:
    import torch
    import triton
    import triton.language as tl
except ImportError:                                 # pragma: no cover - the optional side
    torch = triton = tl = None

ADD_SHAPE = (128, 8192)                    # 2^20 elements
MATMUL = 1024
SOFTMAX_SHAPE = (4096, 1024)


# --- opennki side --------------------------------------------------------------------------------------------

@nki.jit
def nki_add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    width = 2048
    for j in nl.affine_range(a.shape[1] // width):
        cols = nl.ds(j * width, width)
        nl.store(out[:, cols], value=nl.add(nl.load(a[:, cols]), nl.load(b[:, cols])))
    return out


nki_matmul = nki.jit(tiled_matmul)       # the bundled example, as benchmarks/sim_speed.py times it


@nki.jit
def nki_softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(x.shape[0] // 128):
        rows = nl.ds(r * 128, 128)
        t = nl.load(x[rows, :])
        e = nl.exp(nl.subtract(t, nl.max(t, axis=[1])))
        nl.store(out[rows, :], value=nl.multiply(e, nl.reciprocal(nl.sum(e, axis=[1]))))
    return out


# --- Triton side ---------------------------------------------------------------------------------------------

if triton is not None:
    @triton.jit
    def tr_add(x, y, o, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = offs < n
        tl.store(o + offs, tl.load(x + offs, mask=keep) + tl.load(y + offs, mask=keep), mask=keep)

    @triton.jit
    def tr_matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            tile_a = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            tile_b = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(tile_a, tile_b, input_precision="ieee")
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def tr_softmax(x, o, C, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        v = tl.load(x + row * C + cols)
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(o + row * C + cols, e / tl.sum(e, axis=0))


def triton_jobs(a, b, lhsT, rhs, x):
    ta, tb = torch.from_numpy(a.ravel()), torch.from_numpy(b.ravel())
    to_add = torch.empty_like(ta)
    A, B = torch.from_numpy(np.ascontiguousarray(lhsT.T)), torch.from_numpy(rhs)
    C = torch.empty((MATMUL, MATMUL), dtype=torch.float32)
    tx = torch.from_numpy(x)
    to_soft = torch.empty_like(tx)

    def add():
        tr_add[(a.size // 4096,)](ta, tb, to_add, a.size, BLOCK=4096)
        return to_add.numpy().reshape(a.shape)

    def matmul():
        tr_matmul[(MATMUL // 128, MATMUL // 128)](A, B, C, MATMUL, MATMUL, MATMUL, BM=128, BN=128, BK=128)
        return C.numpy()

    def softmax():
        tr_softmax[(x.shape[0],)](tx, to_soft, x.shape[1], BLOCK=x.shape[1])
        return to_soft.numpy()

    return {"vector_add": add, "matmul": matmul, "softmax": softmax}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if triton is None:
        print("triton and torch are not importable here: nothing to compare (see the module docstring)")
        return 0
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(ADD_SHAPE, dtype=np.float32) for _ in range(2))
    lhsT, rhs = (rng.standard_normal((MATMUL, MATMUL), dtype=np.float32) for _ in range(2))
    x = rng.standard_normal(SOFTMAX_SHAPE, dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    references = {"vector_add": a + b, "matmul": lhsT.T.astype(np.float64) @ rhs,
                  "softmax": e / e.sum(axis=1, keepdims=True)}
    ours = {"vector_add": lambda: nki_add(a, b), "matmul": lambda: nki_matmul(lhsT, rhs),
            "softmax": lambda: nki_softmax(x)}
    theirs = triton_jobs(a, b, lhsT, rhs, x)
    figures = {}
    print(f"{'job':12} {'opennki s':>10} {'triton s':>10} {'triton/opennki':>15}")
    for job, reference in references.items():
        for side in (ours, theirs):
            np.testing.assert_allclose(np.asarray(side[job](), np.float64), reference, rtol=2e-3, atol=2e-3)
        t_ours, t_theirs = best_of(ours[job], args.repeat), best_of(theirs[job], args.repeat)
        figures[job] = {"opennki_cpu_s": t_ours, "triton_cpu_s": t_theirs, "triton_over_opennki": t_theirs / t_ours}
        print(f"{job:12} {t_ours:10.3f} {t_theirs:10.3f} {t_theirs / t_ours:15.1f}")
    print(f"triton {triton.__version__}, torch {torch.__version__}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"triton": triton.__version__, "jobs": figures}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
