"""GPU discovery: NVML through a fake module with pynvml's call shapes, and simulated nodes."""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec
import pytest

from tessera_agent.gpus import (
    UNKNOWN,
    GpuDiscoveryError,
    GpuInfo,
    GpuSource,
    Health,
    Inventory,
    NvmlSource,
    SimulatedSource,
    short_model,
)
from tessera_contracts.events.scheduler import DeviceInfo, MigSlotInfo, NodeRegistered
from tests.agent.fake_pynvml import (
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    FakeGpu,
    FakeMig,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
)

GIB = 2**30
TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def h100(i: int, **kw: object) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-{i:08x}-h100", name="NVIDIA H100 80GB HBM3", memory_bytes=81559 * 2**20, **kw)  # type: ignore[arg-type]


def test_plain_eight_gpu_node() -> None:
    nvml = FakeNvml([h100(i, mig_mode=NVML_DEVICE_MIG_DISABLE) for i in range(8)])
    inv = NvmlSource(nvml).inventory()
    assert len(inv.gpus) == 8
    assert [g.index for g in inv.gpus] == list(range(8))
    gpu = inv.gpus[3]
    assert gpu.uuid == "GPU-00000003-h100"
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.model == "H100"
    assert gpu.memory_mib == 81559
    assert not gpu.mig_enabled and gpu.mig == ()
    assert gpu.health.healthy and gpu.health.status == "healthy" and gpu.health.ecc_uncorrected == 0
    assert inv.driver_version == "550.54.15"
    assert inv.cuda_driver_version == "12.4"
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"]
    assert nvml.initialised == 0


def test_bytes_strings_of_older_pynvml_are_decoded() -> None:
    nvml = FakeNvml([h100(0)], as_bytes=True)
    inv = NvmlSource(nvml).inventory()
    assert inv.gpus[0].uuid == "GPU-00000000-h100"
    assert inv.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert inv.driver_version == "550.54.15"


def test_mig_enabled_device_counts_instances_by_profile() -> None:
    migs = {
        0: FakeMig("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 3, 40448),
        1: FakeMig("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 9856),
        2: FakeMig("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 9856),
        # slot 3 empty (NVMLError_NotFound), slot 4 without a name: profile from the attributes
        4: FakeMig(None, 1, 9856),
    }
    nvml = FakeNvml([h100(0, mig_mode=NVML_DEVICE_MIG_ENABLE, migs=migs), h100(1, mig_mode=NVML_DEVICE_MIG_DISABLE)])
    inv = NvmlSource(nvml).inventory()
    mig_gpu, plain = inv.gpus
    assert mig_gpu.mig_enabled
    assert mig_gpu.mig == (MigSlotInfo(profile="1g.10gb", count=3), MigSlotInfo(profile="3g.40gb", count=1))
    assert not plain.mig_enabled and plain.mig == ()
    assert inv.to_devices()[0].mig == mig_gpu.mig


def test_mig_profile_from_attributes_rounds_memory_up_to_gb() -> None:
    a100 = FakeGpu(
        uuid="GPU-a100",
        name="NVIDIA A100-SXM4-40GB",
        memory_bytes=40 * GIB,
        mig_mode=NVML_DEVICE_MIG_ENABLE,
        migs={0: FakeMig(None, 1, 4864), 1: FakeMig(None, 7, 40192)},
    )
    gpu = NvmlSource(FakeNvml([a100])).inventory().gpus[0]
    assert gpu.model == "A100"
    assert {s.profile for s in gpu.mig} == {"1g.5gb", "7g.40gb"}


def test_mig_enabled_without_instances_is_not_offered() -> None:
    nvml = FakeNvml([h100(0, mig_mode=NVML_DEVICE_MIG_ENABLE), h100(1)])
    inv = NvmlSource(nvml).inventory()
    assert inv.gpus[0].mig_enabled and inv.gpus[0].mig == ()
    assert [d.uuid for d in inv.to_devices()] == ["GPU-00000001-h100"]


def test_unsupported_optional_calls_are_unknown_not_a_crash() -> None:
    t4 = FakeGpu(uuid="GPU-t4", name="Tesla T4", memory_bytes=15360 * 2**20, mig_mode=None, ecc_uncorrected=None)
    inv = NvmlSource(FakeNvml([t4], cuda=None)).inventory()
    gpu = inv.gpus[0]
    assert gpu.model == "T4"
    assert gpu.health.ecc_uncorrected is None
    assert gpu.health.status == "unknown"
    assert gpu.health.healthy  # unknown does not take the device away
    assert not gpu.mig_enabled
    assert inv.cuda_driver_version == UNKNOWN
    assert len(inv.to_devices()) == 1


def test_uncorrectable_ecc_errors_make_a_device_unhealthy() -> None:
    nvml = FakeNvml([h100(0), h100(1, ecc_uncorrected=2)])
    inv = NvmlSource(nvml).inventory()
    bad = inv.gpus[1]
    assert not bad.health.healthy
    assert bad.health.status == "unhealthy"
    assert bad.health.reasons == ("2 uncorrectable ECC error(s) since the driver loaded",)
    assert inv.unhealthy == (bad,)
    assert [d.uuid for d in inv.to_devices()] == ["GPU-00000000-h100"]
    assert len(inv.to_devices(include_unhealthy=True)) == 2


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (NVMLError_LibraryNotFound(), "NVML Shared Library Not Found"),
        (NVMLError_DriverNotLoaded(), "Driver Not Loaded"),
    ],
)
def test_nvml_init_failure_is_one_clear_error(error: Exception, words: str) -> None:
    nvml = FakeNvml([h100(0)], init_error=error)
    with pytest.raises(GpuDiscoveryError) as info:
        NvmlSource(nvml).inventory()
    message = str(info.value)
    assert message.startswith("NVML could not be initialised: ")
    assert words in message
    assert "driver" in message
    assert "\n" not in message
    assert nvml.calls == ["nvmlInit"]  # no shutdown of what never started


def test_failing_required_query_names_the_device_and_still_shuts_down() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetUUID(self, handle: object) -> str:
            raise NVMLError_DriverNotLoaded()

    nvml = Broken([h100(0)])
    with pytest.raises(GpuDiscoveryError, match="UUID of GPU 0: Driver Not Loaded"):
        NvmlSource(nvml).inventory()
    assert nvml.calls == ["nvmlInit", "nvmlShutdown"]


def test_real_pynvml_without_a_driver_raises_discovery_error() -> None:
    # The real bindings are installed; on a host without libnvidia-ml this is the user's error.
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(GpuDiscoveryError, match="NVML could not be initialised"):
            NvmlSource().inventory()
    else:
        pynvml.nvmlShutdown()
        inv = NvmlSource().inventory()  # a real GPU host: every device has a UUID
        assert all(g.uuid.startswith(("GPU-", "MIG-")) for g in inv.gpus)


def test_short_model() -> None:
    assert short_model("NVIDIA H100 80GB HBM3") == "H100"
    assert short_model("NVIDIA A100-SXM4-80GB") == "A100"
    assert short_model("Tesla V100-SXM2-16GB") == "V100"
    assert short_model("NVIDIA GeForce RTX 4090") == "RTX 4090"
    assert short_model("NVIDIA") == "NVIDIA"


def test_simulated_spec() -> None:
    source = SimulatedSource.from_spec("node-a", "4xA100-40GB, 2xT4-16GB")
    inv = source.inventory()
    assert [(g.model, g.memory_mib) for g in inv.gpus] == [("A100", 40960)] * 4 + [("T4", 16384)] * 2
    assert [g.uuid for g in inv.gpus][:2] == ["GPU-sim-node-a-0", "GPU-sim-node-a-1"]
    assert inv.gpus[5].uuid == "GPU-sim-node-a-5"
    assert all(g.health.healthy for g in inv.gpus)
    assert SimulatedSource.from_spec("n", "8xH100-80GB").inventory().gpus[7].memory_mib == 81920
    assert SimulatedSource.from_spec("n", "").inventory().gpus == ()
    # deterministic: the same node gets the same inventory
    assert SimulatedSource.from_spec("node-a", "4xA100-40GB,2xT4-16GB").inventory() == inv


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("8H100-80GB", "'<count>x<model>-<memory>GB'"),
        ("8xH100", "not of the form"),
        ("8xH100-80", "not of the form"),
        ("4xA100-40GB,,2xT4-16GB", "'' is not of the form"),
        ("0xH100-80GB", "count must be at least 1"),
        ("2xH100-0GB", "memory must be at least 1 GB"),
        ("65xT4-16GB", "more than 64 per node"),
        ("-1xT4-16GB", "not of the form"),
    ],
)
def test_simulated_bad_spec(spec: str, words: str) -> None:
    with pytest.raises(ValueError, match="spec") as info:
        SimulatedSource.from_spec("n", spec)
    assert words in str(info.value)


def test_simulated_bad_node_id() -> None:
    with pytest.raises(ValueError, match="node id"):
        SimulatedSource.from_spec("bad node", "1xT4-16GB")


def test_simulated_from_trace_rows() -> None:
    with (TRACES / "openb_node_list_gpu_node.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    first = SimulatedSource.from_trace_row(rows[0])
    assert first.node == "openb-node-0000"
    assert (first.cpu_milli, first.memory_mib) == (64000, 262144)
    inv = first.inventory()
    assert [(g.model, g.memory_mib) for g in inv.gpus] == [("P100", 16384)] * 2
    total = sum(len(SimulatedSource.from_trace_row(r).inventory().gpus) for r in rows)
    assert total == 6212  # the trace README's GPU count
    cpu_only = SimulatedSource.from_trace_row({"sn": "x", "cpu_milli": "3", "memory_mib": "1", "gpu": "0", "model": ""})
    assert cpu_only.inventory().gpus == ()
    g2 = SimulatedSource.from_trace_row({"sn": "y", "cpu_milli": "1", "memory_mib": "1", "gpu": "1", "model": "G2"})
    assert g2.inventory().gpus[0].memory_mib == 0  # unpublished size, as in the scheduler's loader


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"sn": "x", "cpu_milli": "1", "memory_mib": "1", "gpu": "2"}, "lacks column 'model'"),
        ({"sn": "x", "cpu_milli": "1", "memory_mib": "1", "gpu": "two", "model": "T4"}, "'x'"),
        ({"sn": "x", "cpu_milli": "1", "memory_mib": "1", "gpu": "2", "model": ""}, "without a model"),
        ({"sn": "x", "cpu_milli": "-1", "memory_mib": "1", "gpu": "2", "model": "T4"}, "negative"),
    ],
)
def test_simulated_bad_trace_row(row: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match="trace node row") as info:
        SimulatedSource.from_trace_row(row)
    assert words in str(info.value)


def test_simulated_health_marks() -> None:
    source = SimulatedSource.from_spec("n", "4xH100-80GB")
    source.mark_unhealthy(1, "fell off the bus")
    source.mark_unhealthy("GPU-sim-n-2", xid=79)
    source.mark_unhealthy(3, xid=13)  # an application's fault: the device stays healthy
    inv = source.inventory()
    assert inv.gpus[1].health.reasons == ("fell off the bus",)
    assert inv.gpus[2].health.reasons == ("XID 79",)
    assert inv.gpus[3].health.healthy and inv.gpus[3].health.xid_errors == (13,)
    assert [d.uuid for d in inv.to_devices()] == ["GPU-sim-n-0", "GPU-sim-n-3"]
    source.mark_unhealthy(0, ecc=1)
    assert not source.inventory().gpus[0].health.healthy
    source.mark_healthy(1)
    assert source.inventory().gpus[1].health == Health()
    with pytest.raises(KeyError, match="no GPU 9"):
        source.mark_unhealthy(9)
    assert inv.gpus[0].health.healthy  # an inventory already taken does not change


def test_to_devices_feeds_node_registered() -> None:
    inv = Inventory(
        gpus=(
            GpuInfo(index=0, uuid="GPU-a", name="NVIDIA H100 80GB HBM3", model="H100", memory_mib=81559),
            GpuInfo(
                index=1,
                uuid="GPU-b",
                name="NVIDIA A100-SXM4-40GB",
                model="A100",
                memory_mib=40960,
                mig_enabled=True,
                mig=(MigSlotInfo(profile="3g.20gb", count=2),),
            ),
        )
    )
    devices = inv.to_devices()
    assert devices == (
        DeviceInfo(uuid="GPU-a", model="H100", memory_mib=81559),
        DeviceInfo(uuid="GPU-b", model="A100", memory_mib=40960, mig=(MigSlotInfo(profile="3g.20gb", count=2),)),
    )
    event = NodeRegistered(node="n1", cluster="c", cpu_milli=64000, memory_mib=262144, devices=devices)
    assert msgspec.json.decode(msgspec.json.encode(event), type=NodeRegistered).devices == devices


def test_gpu_info_validation() -> None:
    with pytest.raises(ValueError, match="MIG mode is off"):
        GpuInfo(index=0, uuid="GPU-a", name="x", model="x", memory_mib=1, mig=(MigSlotInfo(profile="1g.5gb", count=1),))
    with pytest.raises(ValueError, match="bad MIG slot"):
        GpuInfo(
            index=0,
            uuid="GPU-a",
            name="x",
            model="x",
            memory_mib=1,
            mig_enabled=True,
            mig=(MigSlotInfo(profile="big", count=1),),
        )
    with pytest.raises(ValueError, match="memory_mib"):
        GpuInfo(index=0, uuid="GPU-a", name="x", model="x", memory_mib=-1)


def test_sources_satisfy_the_protocol() -> None:
    sources: list[GpuSource] = [NvmlSource(FakeNvml([])), SimulatedSource.from_spec("n", "1xT4-16GB")]
    assert [len(s.inventory().gpus) for s in sources] == [0, 1]
