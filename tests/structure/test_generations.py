"""Which NKI generation something belongs to is a `releases.Generation` member everywhere in the code, never
the strings "legacy" / "new"."""

import ast
from pathlib import Path

import pytest

from opennki.checks.lint import lint
from opennki.releases import Generation

SRC = Path(__file__).resolve().parents[2] / "src" / "opennki"


def _slot_names(tree) -> set[int]:
    """The attribute names listed in `__slots__` (an attribute may be called `legacy`)."""
    return {id(c) for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "__slots__" for t in node.targets) for c in ast.walk(node.value)}


def test_no_generation_is_spelled_as_a_string():
    spelled = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        slots = _slot_names(tree)
        spelled += [(path.relative_to(SRC).as_posix(), node.lineno) for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and node.value in ("legacy", "new") and id(node) not in slots]
    assert spelled == []


def test_the_lint_takes_a_generation():
    def kernel(x):
        return x
    assert lint(kernel, Generation.NEW) == lint(kernel, None) == []
    with pytest.raises(TypeError, match="Generation"):
        lint(kernel, "new")
