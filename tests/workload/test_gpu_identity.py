"""Every GPU named the way a technician finds it (nodefacts.py): UUID, serial, PCI bus id, VBIOS and InfoROM
through NVML, the node's versions and adapters' firmware, into the evidence and into every failure naming a GPU
(text, HTML, JUnit).

NVML is a stand-in with NVML's call shapes (no GPU here): one GPU answers everything, one answers
NotSupported for its serial and InfoROM, and an old binding lacks a call altogether.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
from acceptance_operator.report_cli import for_node
from acceptance_workload.checks import report_model
from acceptance_workload.checks.preflight import nodefacts
from acceptance_workload.checks.report_model import Report
from acceptance_workload.contract.results import CheckResult
from acceptance_workload.report import evidence
from acceptance_workload.report.html_nodes import nodes_section
from acceptance_workload.report.model import GpuIdentity, HostLoad, Nic, NodeFacts
from acceptance_workload.report.render import summary
from acceptance_workload.writers.html import render_html
from acceptance_workload.writers.junit import junit_xml
from acceptance_workload.writers.text import full_text


class NVMLError_NotSupported(Exception):  # pynvml's spelling
    pass


class FakeNvml:
    """Two GPUs: index 0 answers every call (bytes, as older nvidia-ml-py returns), index 1 str with two calls
    NotSupported."""

    GPUS = {
        0: {"uuid": b"GPU-0a1b2c3d-0000-1111-2222-333344445555", "serial": b"1652922012345",
            "bus": b"00000000:1B:00.0", "vbios": b"96.00.89.00.01", "inforom": b"G520.0200.00.05"},
        1: {"uuid": "GPU-99999999-0000-1111-2222-333344445555", "serial": None, "bus": "00000000:43:00.0",
            "vbios": "96.00.89.00.02", "inforom": None},
    }

    def __init__(self) -> None:
        self.calls: list[str] = []

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return next(i for i, g in self.GPUS.items() if g["uuid"] in (uuid, uuid.encode()))

    def _value(self, handle: int, key: str) -> object:
        value = self.GPUS[handle][key]
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlDeviceGetUUID(self, handle: int) -> object:
        return self._value(handle, "uuid")

    def nvmlDeviceGetSerial(self, handle: int) -> object:
        return self._value(handle, "serial")

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._value(handle, "bus"), domain=0)

    def nvmlDeviceGetVbiosVersion(self, handle: int) -> object:
        return self._value(handle, "vbios")

    def nvmlDeviceGetInforomImageVersion(self, handle: int) -> object:
        return self._value(handle, "inforom")


class OldNvml(FakeNvml):
    """A binding without nvmlDeviceGetInforomImageVersion, whose PCI info raises a plain error."""

    nvmlDeviceGetInforomImageVersion = None  # type: ignore[assignment]

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        raise RuntimeError("NVML_ERROR_UNKNOWN")


def test_every_identity_field_is_read_and_not_supported_is_none() -> None:
    nvml = FakeNvml()
    assert nodefacts.gpu_identity(nvml, 0, 0) == GpuIdentity(
        gpu=0, uuid="GPU-0a1b2c3d-0000-1111-2222-333344445555", serial="1652922012345", bus_id="00000000:1B:00.0",
        vbios="96.00.89.00.01", inforom="G520.0200.00.05")
    assert nodefacts.gpu_identity(nvml, 1, 1) == GpuIdentity(
        gpu=1, uuid="GPU-99999999-0000-1111-2222-333344445555", serial=None, bus_id="00000000:43:00.0",
        vbios="96.00.89.00.02", inforom=None)
    old = nodefacts.gpu_identity(OldNvml(), 0, 0)
    assert (old.serial, old.bus_id, old.inforom) == ("1652922012345", None, None)


def test_a_rank_reads_the_gpu_cuda_visible_devices_gives_it() -> None:
    """Simulated node 1 of a local run: its local rank 0 is NVML's GPU 1 (by index or by UUID)."""
    nvml = FakeNvml()
    assert nodefacts.own_gpu(0, {"CUDA_VISIBLE_DEVICES": "1"}, nvml).serial is None
    by_uuid = nodefacts.own_gpu(0, {"CUDA_VISIBLE_DEVICES": "GPU-0a1b2c3d-0000-1111-2222-333344445555"}, nvml)
    assert (by_uuid.gpu, by_uuid.serial) == (0, "1652922012345")


def test_without_nvml_the_identity_is_empty_and_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_nvml() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nodefacts, "nvml_init", no_nvml)
    assert nodefacts.own_gpu(3, {}) == GpuIdentity(gpu=3)
    assert nodefacts.rank_facts(3, None, gpus=True, host_load=None) == {"gpus": [{"gpu": 3}]}


def fake_sysfs(root: Path) -> None:
    """An HCA with firmware, a NIC behind a PCI device, and a virtual interface (no device: left out)."""
    pci = root / "sys" / "devices" / "pci0000:00"
    for name, driver in (("0000:1a:00.0", "mlx5_core"), ("0000:3b:00.0", "ice")):
        (pci / name).mkdir(parents=True)
        (root / "sys" / "bus" / "pci" / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        os.symlink(root / "sys" / "bus" / "pci" / "drivers" / driver, pci / name / "driver")
    ib = root / "sys" / "class" / "infiniband" / "mlx5_0"
    ib.mkdir(parents=True)
    (ib / "fw_ver").write_text("28.39.1002\n")
    (ib / "board_id").write_text("MT_0000000838\n")
    os.symlink(pci / "0000:1a:00.0", ib / "device")
    net = root / "sys" / "class" / "net"
    (net / "eth0").mkdir(parents=True)
    os.symlink(pci / "0000:3b:00.0", net / "eth0" / "device")
    (net / "veth12").mkdir()


def test_node_facts_hold_versions_firmware_and_every_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ethtool (a stand-in on PATH, answering as `ethtool -i` does) gives the Ethernet NIC's firmware."""
    fake_sysfs(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ethtool").write_text('#!/bin/sh\n[ "$1 $2" = "-i eth0" ] || exit 1\n'
                                     'printf "driver: ice\\nversion: 6.8\\nfirmware-version: 4.40 0x8001c967 1.3534.0'
                                     '\\nbus-info: 0000:3b:00.0\\n"\n')
    (bin_dir / "ethtool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    nvml = FakeNvml()
    monkeypatch.setattr(nodefacts, "nvml_init", lambda: nvml)
    versions = SimpleNamespace(driver="550.90.07", cuda="12.4", cuda_driver="12.4", nccl="2.21.5")
    load = HostLoad(stage="preflight", seconds=0.5, cpus=8, busy=0.1, outside=0.0)
    rank0 = nodefacts.rank_facts(0, versions, gpus=True, host_load=load, sys_root=tmp_path, environ={})
    rank1 = nodefacts.rank_facts(1, None, gpus=True, host_load=None, sys_root=tmp_path, environ={})
    [facts] = nodefacts.merge([("n1", rank1), ("n1", rank0)])
    assert (facts.node, facts.driver_version, facts.cuda_version, facts.nccl_version) == \
        ("n1", "550.90.07", "12.4", "2.21.5")
    assert facts.nics == [Nic(name="mlx5_0", firmware="28.39.1002", board_id="MT_0000000838", pci="0000:1a:00.0",
                              driver="mlx5_core"),
                          Nic(name="eth0", firmware="4.40 0x8001c967 1.3534.0", pci="0000:3b:00.0", driver="ice")]
    assert [(g.gpu, g.serial, g.bus_id) for g in facts.gpus] == [(0, "1652922012345", "00000000:1B:00.0"),
                                                                  (1, None, "00000000:43:00.0")]
    assert facts.host_load == [load]


def _report() -> Report:
    failed = CheckResult(check="gpu", name="gemm_tflops_ratio_to_node_median", value=0.71, threshold=0.9,
                         comparison="ge", passed=False, node="n1", gpu=0,
                         message="GPU 0 on node n1: 0.71 of the median")
    other = CheckResult(check="preflight", name="temperature", value=91.0, threshold=85.0, comparison="le",
                        passed=False, node="n1", gpu=1, message="GPU 1 on node n1 at 91 C")
    job = CheckResult(check="nccl", name="all_reduce_busbw", value=300.0, threshold=340.0, comparison="ge",
                      passed=False, message="all_reduce busbw 300 GB/s")
    nvml = FakeNvml()
    gpus = [nodefacts.gpu_identity(nvml, i, i) for i in (0, 1)]
    report = Report(checks_run=["preflight", "gpu", "nccl"], results=[failed, other, job],
                    nodes=[NodeFacts(node="n1", driver_version="550.90.07", gpus=gpus,
                                     nics=[Nic(name="mlx5_0", firmware="28.39.1002")])])
    report.environment.hostnames = ["n1"]
    return report


def test_a_failure_naming_a_gpu_gives_its_serial_and_bus_id_everywhere() -> None:
    report = _report()
    assert nodefacts.annotate(report) == 2 and nodefacts.annotate(report) == 0  # idempotent
    report.finalize()
    gemm, temperature, job = report.results
    assert gemm.message == "GPU 0 on node n1: 0.71 of the median [GPU 0: serial 1652922012345, bus 00000000:1B:00.0]"
    assert temperature.message.endswith("[GPU 1: serial unknown, bus 00000000:43:00.0]")
    assert job.message == "all_reduce busbw 300 GB/s"  # names no GPU
    text = full_text(report)
    fail_rows = [line for line in text.splitlines() if line.startswith("FAIL")]
    assert "serial 1652922012345, bus 00000000:1B:00.0" in fail_rows[0]
    assert "serial 1652922012345, bus 00000000:1B:00.0" in summary(report)  # the termination message
    gpu_rows = text[text.index("# GPUs as a technician finds them"):].splitlines()[2:4]
    assert gpu_rows[0].split() == ["n1", "0", "1652922012345", "00000000:1B:00.0",
                                   "GPU-0a1b2c3d-0000-1111-2222-333344445555", "96.00.89.00.01", "G520.0200.00.05"]
    assert gpu_rows[1].split() == ["n1", "1", "-", "00000000:43:00.0", "GPU-99999999-0000-1111-2222-333344445555",
                                   "96.00.89.00.02", "-"]
    assert "mlx5_0 28.39.1002" in text
    page = nodes_section(report)
    assert "<td>1652922012345</td><td>00000000:1B:00.0</td>" in page and "<td>G520.0200.00.05</td>" in page
    root = ET.fromstring(junit_xml(report).split("\n", 1)[1])
    failures = {c.get("name"): c.find("failure") for c in root.iter("testcase") if c.find("failure") is not None}
    body = failures["gemm_tflops_ratio_to_node_median [node n1, GPU 0]"]
    assert "serial 1652922012345, bus 00000000:1B:00.0" in body.get("message")
    assert {"gpu serial: 1652922012345", "gpu bus id: 00000000:1B:00.0", "gpu vbios: 96.00.89.00.01",
            "gpu inforom: G520.0200.00.05", "gpu uuid: GPU-0a1b2c3d-0000-1111-2222-333344445555"} <= \
        set(body.text.splitlines())
    assert "gpu serial" not in failures["all_reduce_busbw"].text


def test_the_html_report_shows_the_identity_of_a_failed_gpu() -> None:
    report = _report()
    nodefacts.annotate(report)
    report.finalize()
    page = render_html(report)
    failures = page[page.index('<div id="failures">'):page.index("</div>", page.index('<div id="failures">'))]
    assert "serial 1652922012345, bus 00000000:1B:00.0" in failures
    assert '<div id="gpu-identity">' in page and "<td>96.00.89.00.01</td>" in page


def test_node_facts_travel_in_their_nodes_evidence_shard() -> None:
    report = _report()
    report.environment.hostnames = ["n1"] + [f"x{k:02d}" for k in range(10)]  # n1, x00..x06 | x07..x09
    report.nodes.append(NodeFacts(node="x09", driver_version="550.54.15"))
    names = evidence.shard_names("t-evidence", 11)
    status, shards = evidence.split(report, names)
    assert '"x09"' in shards[names[2]] and "1652922012345" in shards[names[1]]
    assert "1652922012345" not in shards[names[0]]  # the job-wide part holds no node's facts
    whole = report_model.assemble(status, shards)
    assert sorted(n.node for n in whole.nodes) == ["n1", "x09"] and whole.gpu_identity("n1", 0) == \
        report.gpu_identity("n1", 0)
    assert [n.node for n in for_node(whole, "x09").nodes] == ["x09"]  # `report NAME --node x09`
