"""`make demo`: run every bundled example kernel on the simulator, compare it with NumPy, and time it with
the NeuronCore cost model.

Each example module in this folder defines EXAMPLE = dict(name, generation, kernel, make_inputs, reference).
The first table shows, per kernel: its API generation, the largest absolute and relative error against the
NumPy (float64) reference, and the simulator's wall time. The second shows the cost model's estimate on
trn2 (latency, what bounds it, roofline, engine utilisation), and a profile of each kernel is written to
out/<kernel>/ (Chrome/Perfetto trace, JSON summary, HTML report).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).parent


def load_examples() -> list[dict]:
    examples = []
    for path in sorted(HERE.glob("*.py")):
        if path.name == pathlib.Path(__file__).name:
            continue
        spec = importlib.util.spec_from_file_location(f"examples.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "EXAMPLE"):
            examples.append(module.EXAMPLE)
    return examples


def run(example: dict, seed: int = 0) -> dict:
    args = example["make_inputs"](np.random.default_rng(seed))
    start = time.perf_counter()
    out = example["kernel"](*args)
    seconds = time.perf_counter() - start
    ref = example["reference"](*args)
    err = np.abs(out.astype(np.float64) - ref)
    return dict(name=example["name"], generation=example["generation"], abs_err=float(err.max()),
                rel_err=float(err.max() / max(np.abs(ref).max(), 1e-30)), seconds=seconds)


def estimate(example: dict, target: str, out_dir: pathlib.Path | None, seed: int = 0):
    """The cost model's estimate of one call (and, with `out_dir`, its profile written there)."""
    from opennki.perf import estimate_call, write_profile
    args = example["make_inputs"](np.random.default_rng(seed))
    result = estimate_call(example["kernel"], args, target=target)
    if out_dir is not None:
        write_profile(result, out_dir / example["name"], overwrite=True)
    return result


def main(out_dir: pathlib.Path | None = HERE.parent / "out", target: str = "trn2") -> int:
    examples = load_examples()
    rows = [run(ex) for ex in examples]
    header = f"{'kernel':20} {'generation':10} {'max abs err':>12} {'max rel err':>12} {'seconds':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:20} {r['generation']:10} {r['abs_err']:12.3g} {r['rel_err']:12.3g} {r['seconds']:8.3f}")
    from opennki.perf import CostResult
    print(f"\nEstimated on {target} by the cost model" + (f"; profiles in {out_dir}/" if out_dir else ""))
    print(CostResult.TABLE_HEADER)
    for ex in examples:
        print(estimate(ex, target, out_dir).table_row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
