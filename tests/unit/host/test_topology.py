"""`nvidia-smi topo -m` read for the environment (issue 38 item 5: seed 004's NVLink pair), on the tool's real
output (tests/data/host_evidence_h100/SOURCE.md says where it came from)."""

from __future__ import annotations

from ninferkit.host.evidence import topology_record
from ninferkit.host.findings import environment_rows, topology_pairs
from ninferkit.rundir.records import ProbeFacts
from tests.conftest import DATA

H100 = DATA / "host_evidence_h100"


def test_one_gpu_has_no_pair_and_the_terminal_codes_are_gone() -> None:
    text = (H100 / "nvidia_smi_topo_m.txt").read_text()
    assert "\x1b[4m" in text  # as nvidia-smi wrote it into a file
    record = topology_record(text)
    assert record["lines"] == ["\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID", "GPU0\t X \t0-15\t0\t\tN/A"]
    assert record["links"] == {"GPU0": {}}  # the legend below the matrix is not read as rows
    facts = ProbeFacts.model_validate({"gpu_topology": record})
    assert topology_pairs(facts) == ""
    assert not any(fact.startswith("GPU pairs") for fact, _ in environment_rows(facts))


def test_a_probe_without_the_matrix_still_reads() -> None:
    """probe.json files written before the matrix was recorded have no gpu_topology."""
    facts = ProbeFacts.model_validate({})
    assert facts.gpu_topology.source is None and topology_pairs(facts) == ""


def test_a_pairs_links_read_as_the_legend_words_them() -> None:
    """The words for a recorded matrix's pairs (no pair was ever captured here: these are the record's own values,
    not nvidia-smi's lines); 004's V100-SXM2 pair would print NV# between its two GPUs."""
    facts = ProbeFacts.model_validate({"gpu_topology": {"source": "nvidia-smi topo -m", "links": {
        "GPU0": {"GPU1": "NV1", "GPU2": "NV2", "GPU3": "SYS"}, "GPU1": {"GPU0": "NV1"}}}})
    assert topology_pairs(facts) == ("GPU0–GPU1: NV1, one NVLink; GPU0–GPU2: NV2, a bonded set of 2 NVLinks; "
                                     "GPU0–GPU3: SYS, PCIe and the interconnect between NUMA nodes, no NVLink")
    assert ("GPU pairs (nvidia-smi topo -m)", topology_pairs(facts)) in environment_rows(facts)
