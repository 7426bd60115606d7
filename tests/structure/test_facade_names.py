"""The `nisa` facades of both generations take each instruction's public name from its class
(`Instruction.api_name()`, `nisa.<opcode>`), never spell it by hand: a facade function named like an opcode
builds that opcode's class, and no facade source holds a `"nisa.<opcode>"` literal (release-change texts,
which describe calls, are longer strings)."""

import ast
import re
from pathlib import Path

import pytest

from opennki.instructions.base import REGISTRY

SRC = Path(__file__).resolve().parents[2] / "src" / "opennki"
FACADES = ("isa/__init__.py", "legacy/isa/__init__.py")
_NAME = re.compile(r"nisa\.(\w+)")


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("facade", FACADES)
def test_a_function_named_like_an_opcode_builds_its_class(facade):
    functions = _functions(SRC / facade)
    named = sorted(set(functions) & set(REGISTRY))
    assert len(named) > 30
    for opcode in named:
        built = {n.attr for n in ast.walk(functions[opcode]) if isinstance(n, ast.Attribute)}
        assert REGISTRY[opcode].__name__ in built, (facade, opcode)
        assert REGISTRY[opcode].api_name() == f"nisa.{opcode}"


@pytest.mark.parametrize("facade", FACADES)
def test_no_instruction_name_is_spelled_by_hand(facade):
    tree = ast.parse((SRC / facade).read_text())
    spelled = sorted({(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant)
                      and isinstance(n.value, str) and (m := _NAME.fullmatch(n.value)) and m.group(1) in REGISTRY})
    assert spelled == [], f"{facade}: use the class's api_name() for {spelled}"
