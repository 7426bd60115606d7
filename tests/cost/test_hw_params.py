"""Cost parameters of every target: present, validated, consistent with the published peaks."""

import dataclasses

import pytest

from opennki.hw import TARGETS, TRN1, TRN2, TRN3, get_target
from opennki.hw.cost import DMA_EFFICIENCY_CURVE, DmaCost, EngineCost, TensorEngineCost


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_target_has_cost_parameters(name):
    assert get_target(name).cost is not None


@pytest.mark.parametrize("hw, tflops", [(TRN1, 92), (TRN2, 79), (TRN3, 79)])
def test_tensor_engine_peak_matches_the_published_bf16_rate(hw, tflops):
    # hardware.md §3: 92 / 79 / 79 TFLOPS bf16 per NeuronCore
    assert hw.cost.tensor.peak_bf16_flops_per_ns / 1000 == pytest.approx(tflops, rel=0.01)


@pytest.mark.parametrize("hw, gbps", [(TRN1, 272), (TRN2, 368), (TRN3, 528)])
def test_dma_aggregate_bandwidth_matches_the_published_table(hw, gbps):
    assert hw.cost.dma.aggregate_bandwidth_bytes_per_ns == pytest.approx(gbps)


def test_fp8_and_mx_peaks_follow_the_generation():
    assert TRN1.cost.peak_flops_per_ns("float8_e4m3") == TRN1.cost.tensor.peak_bf16_flops_per_ns
    assert TRN2.cost.peak_flops_per_ns("float8_e4m3") == pytest.approx(2 * 78643.2)      # 158 TFLOPS
    assert TRN3.cost.peak_flops_per_ns("float8_e4m3", mode="mx") == pytest.approx(4 * 78643.2)  # 315
    assert TRN2.cost.peak_flops_per_ns("float32") == pytest.approx(78643.2 / 4)          # 20 TFLOPS


def test_dma_efficiency_interpolates_the_published_curve():
    dma = TRN2.cost.dma
    for size, eff in DMA_EFFICIENCY_CURVE:
        assert dma.efficiency(size) == pytest.approx(eff)
    sizes = [8, 16, 32, 48, 100, 300, 700, 1500, 3000, 6000, 20000, 40000, 1 << 20]
    effs = [dma.efficiency(s) for s in sizes]
    assert effs == sorted(effs) and effs[-1] == 1.0
    assert dma.efficiency(16) == pytest.approx(0.014 / 2)     # proportional below the first point


@pytest.mark.parametrize("cls, field, value", [
    (EngineCost, "clock_ghz", 0.0), (EngineCost, "min_ii_cycles", -1),
    (TensorEngineCost, "clock_ghz", -2.4), (TensorEngineCost, "throttle_start_fraction", 1.5),
])
def test_engine_parameters_are_validated(cls, field, value):
    base = {"clock_ghz": 1.0}
    with pytest.raises(ValueError, match=field):
        cls(**{**base, field: value})


def test_dma_parameters_are_validated():
    good = dataclasses.asdict(TRN2.cost.dma)
    good.pop("_sizes")
    DmaCost(**good)
    with pytest.raises(ValueError, match="efficiency_curve"):
        DmaCost(**{**good, "efficiency_curve": ((1024, 0.5), (512, 0.9))})
    with pytest.raises(ValueError, match="128 partitions"):
        DmaCost(**{**good, "engines": 8})
    with pytest.raises(ValueError, match="efficiencies"):
        DmaCost(**{**good, "rmw_efficiency": 0.0})


def test_existing_hardware_fields_still_work():
    assert TRN2.memory.sbuf_bytes_per_partition == 224 * 1024 and TRN3.tiles.matmul_moving_max_bf16 == 8192
    bare = dataclasses.replace(TRN2, cost=None)
    assert bare.cost is None and bare.memory is TRN2.memory


def test_a_target_without_cost_parameters_cannot_be_estimated():
    from opennki.cost import CostModel
    with pytest.raises(ValueError, match="no cost parameters"):
        CostModel(dataclasses.replace(TRN2, cost=None))


def test_capabilities_are_data_each_from_the_generation_that_introduced_it():
    from dataclasses import fields, replace

    from opennki.hw import TRN1, TRN2, TRN3
    from opennki.hw.config import Capabilities
    for hw in (TRN1, TRN2, TRN3):
        assert hw.capabilities == Capabilities.of_generation(hw.nc_version), hw.name
    assert not any(getattr(TRN1.capabilities, f.name) for f in fields(Capabilities))
    assert TRN2.capabilities.lnc2 and not TRN2.capabilities.psum_bf16_matmul and TRN3.capabilities.mx
    with pytest.raises(ValueError, match="psum_bf16_matmul exists from NeuronCore-v4"):
        replace(TRN2, capabilities=replace(TRN2.capabilities, psum_bf16_matmul=True))
