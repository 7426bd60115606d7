"""Cost rules find operands by role name: every name a rule looks up is an operand field of an instruction
the rule costs, and every instruction it costs has one of the names of each lookup (a lookup that finds
nothing raises; no rule falls back silently to another operand)."""

import ast
import inspect
import textwrap

import pytest

from opennki.cost.rules import RULES
from opennki.cost.rules import common
from opennki.instructions.base import REGISTRY

LOOKUPS = {"find", "main_input", "main_output", "named"}


def lookups(fn) -> list[tuple[str, ...]]:
    """The role names of each lookup call in `fn` (string constants; `_dst_src(dst_roles=, src_roles=)`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if name in LOOKUPS:
            roles = tuple(a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str))
            if roles:
                found.append(roles)
        elif name == "_dst_src":
            given = {k.arg: k.value for k in node.keywords}
            for key, default in (("dst_roles", ("dst",)), ("src_roles", ("src",))):
                value = given.get(key)
                found.append(tuple(ast.literal_eval(value)) if value is not None else default)
    return found


def fields_of(opcode: str) -> set[str]:
    return {f.name for f in REGISTRY[opcode].operand_fields()}


RULE_OPCODES: dict = {}
for _opcode, _rule in RULES.items():
    RULE_OPCODES.setdefault(_rule, []).append(_opcode)


@pytest.mark.parametrize("rule", sorted(RULE_OPCODES, key=lambda r: r.__name__), ids=lambda r: r.__name__)
def test_every_role_a_rule_looks_up_is_an_operand_of_the_opcodes_it_costs(rule):
    opcodes = [o for o in RULE_OPCODES[rule] if o in REGISTRY]
    for roles in lookups(rule):
        for opcode in opcodes:
            assert set(roles) & fields_of(opcode), f"{rule.__name__} looks up {roles}; {opcode} has none of them"
        dead = {r for r in roles if not any(r in fields_of(o) for o in opcodes)} if opcodes else set()
        assert not dead, f"{rule.__name__} looks up {sorted(dead)}, which no instruction it costs has"


def test_the_checker_reads_the_lookups():
    from opennki.cost.rules import vector
    assert ("on_true_tile", "data", "src", "dst") in lookups(vector.one_pass)


def test_a_lookup_that_finds_nothing_raises_instead_of_guessing():
    from opennki.events import InstructionExecuted
    ev = InstructionExecuted.__new__(InstructionExecuted)
    object.__setattr__(ev, "opcode", "demo")
    object.__setattr__(ev, "operands", ())
    with pytest.raises(LookupError, match="no operand data"):
        common.main_input(ev, "data")


def find_lookups(fn) -> list[tuple[str, ...]]:
    """The role names of each `find` call in `fn`: a lookup that may come back empty."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return [tuple(a.value for a in node.args[1:] if isinstance(a, ast.Constant))
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "find"]


def may_be_absent(opcode: str, role: str) -> bool:
    """Whether operand field `role` of `opcode` can be missing from an event: optional, or an immediate."""
    field = next((f for f in REGISTRY[opcode].operand_fields() if f.name == role), None)
    return field is None or field.metadata["optional"] or field.metadata["immediate"]


@pytest.mark.parametrize("rule", sorted(RULE_OPCODES, key=lambda r: r.__name__), ids=lambda r: r.__name__)
def test_only_an_operand_that_may_be_absent_is_looked_up_without_raising(rule):
    """`find` (None when absent) is for optional or immediate operands; a rule reads a required one with
    `named`, which raises if it is missing, so no rule silently costs without it."""
    opcodes = [o for o in RULE_OPCODES[rule] if o in REGISTRY]
    for roles in find_lookups(rule):
        for opcode in opcodes:
            required = [r for r in roles if not may_be_absent(opcode, r)]
            assert not required, f"{rule.__name__} finds {required} of {opcode}, which it always has: use named"
