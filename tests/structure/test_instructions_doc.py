"""docs/instructions.md is current: it is what docs/gen_instructions.py writes from the code now."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("gen_instructions", ROOT / "docs" / "gen_instructions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_instructions_page_is_current():
    expected = generator().table()
    assert (ROOT / "docs" / "instructions.md").read_text() == expected, \
        "docs/instructions.md is out of date: run `PYTHONPATH=src python3 docs/gen_instructions.py`"


def test_every_opcode_has_a_row_a_class_and_a_cost_rule():
    from opennki.instructions.base import REGISTRY
    rows = [line for line in generator().table().splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == sorted(REGISTRY)
    assert not any("**none**" in r for r in rows)
    activation = next(r for r in rows if r.startswith("| `activation` |"))
    assert "`nisa.activation`" in activation and "scalar.py` `Activation`" in activation
    assert "tests/isa/test_activation.py" in activation
