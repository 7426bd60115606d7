"""Target capabilities are data (`hw/config.py`'s `Capabilities`, listed per target in `hw/trn*.py`): no code
outside `hw/` compares a NeuronCore generation number, and no message outside it names a generation or a
target; messages take the first generation with a capability from the data (`hw.first_with`)."""

import ast
import re
from pathlib import Path

import pytest

from opennki.errors import KernelError
from opennki.hw import TRN1, first_with
from opennki.instructions.base import require

SRC = Path(__file__).resolve().parents[2] / "src" / "opennki"
# the settings' and the command line's help texts list the target names a user may give
_TARGET_LISTS = ("cli.py", "environment.py")
_GENERATION = re.compile(r"NeuronCore-v\d|\btrn[123]\b|\bgen[234]\b|\binf2\b")


def _sources():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not rel.startswith("hw/"):
            yield rel, ast.parse(path.read_text())


def _docstrings(tree) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def test_no_generation_number_is_compared_outside_the_hardware_data():
    gates = [(rel, node.lineno) for rel, tree in _sources() for node in ast.walk(tree)
             if isinstance(node, ast.Compare) and any(
                 isinstance(side, ast.Attribute) and side.attr == "nc_version"
                 for side in [node.left, *node.comparators])]
    assert gates == []


def test_no_message_names_a_generation_or_a_target():
    named = []
    for rel, tree in _sources():
        if rel in _TARGET_LISTS:
            continue
        docs = _docstrings(tree)
        named += [(rel, node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                  and _GENERATION.search(node.value)]
    assert named == []


def test_a_missing_capability_names_the_first_generation_with_it_from_the_data():
    assert first_with("lnc2") == "NeuronCore-v3 (trn2)" and first_with("mx") == "NeuronCore-v4 (trn3)"
    with pytest.raises(KernelError, match=r"LNC=2 needs NeuronCore-v3 \(trn2\) or newer") as info:
        require(TRN1, "lnc2", "LNC=2")
    assert (info.value.got, info.value.expected) == ("trn1 (NeuronCore-v2)", "NeuronCore-v3+")
