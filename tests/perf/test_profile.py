"""profile: NKI's API and artifacts (trace, JSON reports, HTML and text reports), and the report's hints."""

import json
import os

import numpy as np
import pytest

import opennki.legacy as nki
from opennki.perf.estimate import estimate
from opennki.perf import artifact_names, chrome_trace, format_report, hints, write_profile
from opennki.perf.report import critical_dependencies
from tests.cost import kernels as K
from tests.cost.helpers import spec


@pytest.fixture
def a(rng):
    return rng.standard_normal((512, 1024)).astype(np.float32)


def test_profile_requires_a_working_directory(a):
    with pytest.raises(ValueError, match="^Please specify working directory$"):
        nki.profile(K.scale_fresh)(a)


def test_profile_writes_nki_named_artifacts(a, tmp_path, capsys):
    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="profile-custom.ntff", num_execs=20,
                       profile_nth=10)(K.scale_fresh)
    out = prof(a)
    assert out.shape == a.shape
    assert f"Profile results are written to {tmp_path}" in capsys.readouterr().out
    files = sorted(os.listdir(tmp_path))
    assert files == ["json_reports", "profile-custom.html", "profile-custom.txt",
                     "profile-custom_exec_10.trace.json", "profile-custom_exec_20.trace.json"]
    reports = sorted(os.listdir(tmp_path / "json_reports"))
    assert reports == ["profile-custom_exec_10.json", "profile-custom_exec_20.json"]
    doc = json.loads((tmp_path / "json_reports" / reports[0]).read_text())
    summary = doc["summary"][0]
    assert summary["kernel"] == "scale_fresh" and summary["execution"] == 10
    assert summary["dma_transfer_count"] == 8 and summary["total_time"] > 0
    assert len(doc["instruction"]) == summary["instruction_count"]
    assert {"timestamp", "duration", "label", "opcode", "nki_source_location"} <= set(doc["instruction"][0])


@pytest.mark.parametrize("nth, execs, expected", [(1, None, ["p"]), (2, None, ["p_exec_2"]),
                                                   (10, 5, ["p_exec_10"]), (3, 7, ["p_exec_3", "p_exec_6"])])
def test_traced_executions_follow_nki(nth, execs, expected):
    names = artifact_names("p.ntff", nth, execs)
    assert names["traces"] == [f"{n}.trace.json" for n in expected]


def test_profile_refuses_to_overwrite_unless_asked(a, tmp_path):
    nki.profile(working_directory=str(tmp_path))(K.scale_fresh)(a)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        nki.profile(working_directory=str(tmp_path))(K.scale_fresh)(a)
    nki.profile(working_directory=str(tmp_path), overwrite=True)(K.scale_fresh)(a)


def test_trace_has_engine_and_queue_rows_and_one_slice_per_instruction():
    r = estimate(K.softmax_rows, (spec((256, 512)),), target="trn2")
    trace = chrome_trace(r)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"Vector", "Scalar", "Sync", "qSyncIO0", "qSyncIO1"} <= names
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and not e["name"].startswith("dma_trigger")]
    assert len(slices) == len(r.records)
    act = next(e for e in slices if e["name"] == "activation")
    assert act["args"]["nki_source_location"].startswith("kernels.py:")
    assert "data=sbuf float32[128, 512]" in act["args"]["operands"]
    assert all(e["dur"] >= 0 for e in slices)


def test_text_report_shows_hot_spots_by_kernel_line():
    r = estimate(K.softmax_rows, (spec((256, 512)),), target="trn2")
    text = format_report(r)
    assert "Hot spots" in text and "Engine utilisation" in text
    assert "lnl.exp(lnl.subtract(x, m))" in text          # the kernel line's source


@pytest.mark.parametrize("parallel", [True, False])
def test_the_text_report_lists_the_checks_findings(parallel, tmp_path, rng):
    import inspect

    import opennki.legacy.language as nl
    from tests.checks.test_races import _prefix_sum      # the race checker's loop-carried RAW kernel

    kernel = _prefix_sum(nl.affine_range if parallel else nl.sequential_range)
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)
    nki.profile(working_directory=str(tmp_path), save_trace_name="p.ntff")(kernel)(x)
    text = (tmp_path / "p.txt").read_text()
    section = text[text.index("\nFindings"):]
    if not parallel:
        assert section.strip() == "Findings: none (the race checker and the lint found nothing)."
        return
    lines, start = inspect.getsourcelines(kernel)
    read = start + next(i for i, s in enumerate(lines) if "nl.add(prev" in s)
    assert section.startswith("\nFindings (1):\n  race: [affine_loop_carried_raw] RAW between iterations 1 and 2")
    assert section.count(f"test_races.py:{read})") == 2          # both iterations' accesses are that line
    assert "nl.add(prev, nl.load(x[i]))" in section
    assert "regions: sbuf partitions 0-16 bytes" in section and "iterations: 1, 2" in section
    assert "programs:" not in section                  # one program: no grid to name
    assert "why: NKI's compiler treats affine_range iterations as independent" in section
    assert "fix: use nl.sequential_range for this loop" in section


def test_an_unchecked_estimate_says_so_in_the_text_report():
    text = format_report(estimate(K.softmax_rows, (spec((256, 512)),), target="trn2"))
    assert text.endswith("Findings: the checks did not run with this estimate.")


@pytest.mark.parametrize("kernel, args, kind", [
    (K.narrow_loads, (spec((128, 512)),), "small_dma"),
    (K.tiled_matmul, (spec((256, 128)), spec((256, 512))), "fp32_matmul"),
    (K.scale_reused, (spec((2048, 2048)),), "buffer_reuse"),
    (K.tiled_matmul, (spec((256, 128), "bfloat16"), spec((256, 512), "bfloat16")), "idle_tensor_engine"),
])
def test_hints_spot_known_anti_patterns(kernel, args, kind):
    found = {h.kind for h in hints(estimate(kernel, args, target="trn2"))}
    assert kind in found


def test_good_kernels_get_no_hints():
    r = estimate(K.matmul_resident, (spec((128, 128), "bfloat16"), spec((128, 512), "bfloat16"), 200),
                 target="trn2")
    assert hints(r) == [] and "Hints: none" in format_report(r)


def test_write_profile_for_tools(tmp_path):
    r = estimate(K.scale_fresh, (spec((256, 512)),), target="trn1")
    paths = write_profile(r, str(tmp_path / "out"))
    assert all(os.path.exists(p) for p in paths) and len(paths) == 4


def test_baremetal_save_trace_name_writes_the_models_trace(a, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = nki.baremetal(save_trace_name="run.ntff")(K.scale_fresh)(a)
    np.testing.assert_allclose(out, a * 3.0, rtol=1e-6)          # baremetal still computes
    trace = json.loads((tmp_path / "run.trace.json").read_text())
    assert any(e.get("name") == "tensor_scalar" for e in trace["traceEvents"])


def test_summaries_are_strict_json_even_without_hbm_traffic():
    r = estimate(K.one_iota, (spec((128, 512)),), target="trn2")
    summary = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert summary["hbm_read_bytes"] == 0 and summary["roofline"]["mm_arithmetic_intensity"] is None
    assert summary["engines"]["GpSimd"]["instruction_count"] == 1


def test_instruction_details_list_predecessors_with_kind_and_region(tmp_path):
    r = estimate(K.scale_reused, (spec((512, 2048)),), target="trn2")
    write_profile(r, str(tmp_path / "out"))
    with open(tmp_path / "out" / "json_reports" / "profile.json") as f:
        rows = json.load(f)["instruction"]
    # iteration 1's load into `t` overwrites what iteration 0's load wrote (output) and its multiply read (anti)
    load1 = rows[3]
    assert load1["nki_source_location"] == "kernels.py:99"
    kinds = {(p["instruction"], p["kind"]) for p in load1["predecessors"]}
    assert kinds == {(0, "output"), (1, "anti")}
    assert all(p["region"].startswith("sbuf ") and "partitions [0, 128)" in p["region"]
               for p in load1["predecessors"])
    mul1 = rows[4]
    assert {(p["instruction"], p["kind"]) for p in mul1["predecessors"]} >= {(3, "flow")}
    assert [p for p in mul1["predecessors"] if p["gating"]][0]["kind"] == "flow"


def test_text_report_names_the_dependence_that_makes_the_critical_path():
    r = estimate(K.scale_reused, (spec((512, 2048)),), target="trn2")
    deps = critical_dependencies(r)
    top = deps[0]
    assert (top.line, top.opcode, top.pred_line, top.pred_opcode, top.kind) == (
        "kernels.py:101", "dma_copy", "kernels.py:100", "tensor_scalar", "flow")
    assert top.count == 4 and top.stall_ns > 0
    text = format_report(r)
    assert "Critical path:" in text
    assert "kernels.py:101 dma_copy waits for kernels.py:100 tensor_scalar: flow dependence on sbuf" in text
