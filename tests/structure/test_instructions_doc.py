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


def test_each_row_gives_the_result_rule_of_its_class():
    from opennki.instructions.base import REGISTRY
    rows = {r.split("`")[1]: r.split(" | ") for r in generator().table().splitlines() if r.startswith("| `")}
    rule = {op: cells[5] for op, cells in rows.items()}
    assert {op for op, text in rule.items() if text} == {op for op, c in REGISTRY.items() if c.has_result_rule()}
    assert "[P, 6]" in rule["bn_stats"] and "`BnStats.result`" in rule["bn_stats"]
    assert "fp32" in rule["nc_matmul"] and "`NcMatmul.result`" in rule["nc_matmul"]
    assert rule["tensor_copy"] == rule["tensor_copy_dynamic_src"] == "shape and dtype of `src`"
    assert rule["dma_copy"] == "" and rule["tensor_copy_dynamic_dst"] == ""
