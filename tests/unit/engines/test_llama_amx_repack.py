"""The AMX crash of the pinned llama.cpp (SIGSEGV at warm-up after repacking Q4_1 weights into AMX tiles):
found by the setup step from the CPU's flags, avoided at launch with --no-repack, diagnosed from a log.

No log of that crash has been captured (on the device machine's AMX Xeon the real file served with
repacking on: tests/data/llama_server_cpu_amx/README.md), so the diagnosis is tested on real logs of AMX
launches that served (tests/data/llama_server_cpu_amx/), cut where the crash stops its log: right after the
warm-up line (llama.cpp has no SIGSEGV handler, so nothing follows). The CPU flags are passed in, never read
from this machine, so the tests mean the same on a CPU with AMX and one without; the AMX flags are those the
device machine's /proc/cpuinfo printed (tests/data/llama_server_cpu_amx/README.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ninferkit.engines import get_adapter
from ninferkit.engines.llama_server.amx import repack_hazard
from ninferkit.host.cpu import HostCPU, host_cpu, read_cpuinfo
from ninferkit.params import load_profile
from ninferkit.steps import probe
from tests.conftest import DATA, LOCAL_CPU

AMX = frozenset({"fpu", "avx512f", "amx_bf16", "amx_int8", "amx_tile"})
ADAPTER = get_adapter("llama_server")
WARM_UP = "warming up the model with an empty run"


def test_a_model_not_there_yet_is_a_hazard_of_unknown_type(tmp_path: Path) -> None:
    hazard = repack_hazard(load_profile(LOCAL_CPU).profile, tmp_path / "absent.gguf", AMX)
    assert hazard is not None and hazard.file_type is None and "not there yet" in hazard.reason()


def test_the_probe_records_the_cpus_amx_flags() -> None:
    cpu = probe.cpu_facts()
    assert cpu["amx"] == sorted(flag for flag in host_cpu().flags if flag.startswith("amx"))
    assert "fpu" in host_cpu().flags  # every x86-64 CPU
    parsed = read_cpuinfo("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu amx_tile avx2\n\nprocessor\t: 1\n"
                          "flags\t\t: fpu\n")
    assert parsed == HostCPU("X", frozenset({"fpu", "amx_tile", "avx2"}))


AMX_LOGS = sorted(p.name for p in (DATA / "llama_server_cpu_amx").glob("*.log")
                  if "AMX model buffer size" in p.read_text())
"""The AMX launches that repacked weights into AMX tiles (and served)."""


@pytest.mark.parametrize("name", AMX_LOGS)
def test_a_log_that_stops_at_warm_up_after_an_amx_repack_is_the_crash(name: str) -> None:
    text = (DATA / "llama_server_cpu_amx" / name).read_text()
    assert ADAPTER.diagnose(text) is None  # the launch served
    cut = text[:text.index("\n", text.index(WARM_UP)) + 1]
    found = ADAPTER.diagnose(cut)
    assert found is not None and found.code == "amx_repack_crash"
    assert "--no-repack" in found.fix and "AMX model buffer size" in found.evidence


def test_the_same_cut_without_an_amx_buffer_is_not_the_crash() -> None:
    text = (DATA / "llama_server_logs" / "c2048-np1-f16.log").read_text()  # a CPU without AMX
    cut = text[:text.index("\n", text.index(WARM_UP)) + 1]
    found = ADAPTER.diagnose(cut)
    assert found is None or found.code != "amx_repack_crash"
