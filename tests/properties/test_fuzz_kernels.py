"""Hypothesis over generated kernels of both generations (tests/properties/fuzz_kernels.py): legal ones
match the independent NumPy model, illegal ones raise an OpenNKIError at the marked kernel line, and the
caller's inputs are never changed. A bounded number of examples here; `tools/fuzz_kernels.py` runs
thousands and prints the count per outcome class."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opennki.releases import Generation
from tests.properties.fuzz_kernels import FAULTS, MARKS, Case, Chooser, Fault, Step, draw_case, run_case

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw, illegal):
    return draw_case(Chooser(draw=draw), illegal=illegal)


@SETTINGS
@given(case=cases(illegal=False))
def test_legal_generated_kernels_match_the_numpy_model(case):
    assert run_case(case, timeout_s=30) == ("ok", ""), case


@SETTINGS
@given(case=cases(illegal=True))
def test_illegal_generated_kernels_raise_opennki_errors_at_the_marked_line(case):
    assert run_case(case, timeout_s=30) == ("ok", ""), case


def test_the_oracle_catches_a_wrong_answer_and_a_misplaced_error(monkeypatch):
    """The fuzzer's own checks can fail: a model that disagrees is "wrong", and so is an error expected at
    another line."""
    from tests.properties import fuzz_kernels
    case = Case(Generation.LEGACY, P=8, F=4, chunks=1, grid=1, dtype=fuzz_kernels.DTYPES[0], steps=[Step("exp")])
    assert run_case(case) == ("ok", "")
    monkeypatch.setitem(fuzz_kernels.MODEL, "exp", lambda v, b, s: fuzz_kernels._exact(fuzz_kernels.np.tanh, v))
    assert run_case(case)[0] == "wrong"
    monkeypatch.undo()
    bad = Case(Generation.NEW, P=8, F=4, chunks=1, grid=1, dtype=fuzz_kernels.DTYPES[0], steps=[Step("exp")],
               fault=Fault("operand", None, "step", 0))
    assert run_case(bad) == ("ok", "")
    monkeypatch.setitem(MARKS, "new_exp", (MARKS["new_exp"][0], 1))
    assert run_case(bad)[0] == "wrong"
    assert set(FAULTS) >= {"operand", "dtype", "shape", "axis", "scale", "op", "mask", "loop", "view", "hbm",
                           "grid", "input_dtype", "readonly", "garbage"}
