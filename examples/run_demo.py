"""`make demo`: run every bundled example kernel on the simulator and compare it with NumPy.

Each example module in this folder defines EXAMPLE = dict(name, generation, kernel, make_inputs, reference).
The table shows, per kernel: its API generation, the largest absolute and relative error against the NumPy
(float64) reference, and the simulator's wall time.
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


def main() -> int:
    rows = [run(ex) for ex in load_examples()]
    header = f"{'kernel':20} {'generation':10} {'max abs err':>12} {'max rel err':>12} {'seconds':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['name']:20} {r['generation']:10} {r['abs_err']:12.3g} {r['rel_err']:12.3g} {r['seconds']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
