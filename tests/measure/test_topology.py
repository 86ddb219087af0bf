import pytest

from mgpu_helpers.models import topology
from mgpu_helpers.report import recorded

RAW_WITH_ANSI = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n"
)

FOUR_GPUS_AND_A_NIC = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\n"
    "GPU0\t X \tNV4\tSYS\tSYS\tPIX\t0-15\t0\n"
    "GPU1\tNV4\t X \tSYS\tSYS\tPIX\t0-15\t0\n"
    "GPU2\tSYS\tSYS\t X \tNV4\tSYS\t16-31\t1\n"
    "GPU3\tSYS\tSYS\tNV4\t X \tSYS\t16-31\t1\n"
    "NIC0\tPIX\tPIX\tSYS\tSYS\t X \n\nLegend:\n"
)


def test_parses_raw_nvidia_smi_output_with_ansi_codes():
    t = topology.parse_topo_matrix(RAW_WITH_ANSI)
    assert t.names == ("GPU0", "GPU1")
    assert t.links == (("X", "NV18"), ("NV18", "X"))
    assert t.columns["GPU1"] == {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}


def test_header_found_when_the_leading_tab_is_lost():
    t = topology.parse_topo_matrix(RAW_WITH_ANSI.lstrip("\t"))
    assert t.links[1] == ("NV18", "X")


def test_nic_rows_are_left_out_of_the_gpu_matrix():
    t = topology.parse_topo_matrix(FOUR_GPUS_AND_A_NIC)
    assert t.names == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert t.links[0] == ("X", "NV4", "SYS", "SYS")
    assert t.columns["GPU2"]["NUMA Affinity"] == "1"
    assert topology.pairs(t)[0][2] == "NV4" and topology.pairs(t)[-1][2] == "SYS"


def test_recorded_h200_topology_is_labelled_and_nvlinked():
    t = recorded.topology_matrix()
    assert t.names == ("GPU0", "GPU1") and t.links[0][1] == "NV18"
    assert t.source.startswith("recorded on 2 x NVIDIA H200, NVLink NV18, 2026-11-30")
    text = topology.summary(t)
    assert "GPU0-GPU1: NV18 = a bonded set of 18 NVLinks" in text


def test_from_links_wraps_nvml_words():
    t = topology.from_links((("X", "PHB"), ("PHB", "X")))
    assert t.source == "NVML" and "PCIe host bridge" in topology.link_meaning(t.links[0][1])


def test_text_without_a_matrix_is_rejected():
    with pytest.raises(ValueError, match="header"):
        topology.parse_topo_matrix("No devices were found\n")


def test_nv_words_are_bonded_links_through_nvswitch_on_8_gpu_boards_or_direct():
    meaning = topology.link_meaning("NV18")
    assert meaning.startswith("a bonded set of 18 NVLinks")
    assert "NVSwitch chips on 8-GPU HGX boards" in meaning and "direct on 4-GPU boards" in meaning
    assert "per direction" in topology.summary(recorded.topology_matrix())
    assert "per direction" not in topology.summary(
        topology.parse_topo_matrix("\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n")
    )


def test_recorded_nvlink_speeds_add_up_to_478_gb_per_direction():
    speeds = recorded.nvlink_speeds()
    assert sorted(speeds) == ["GPU0", "GPU1"]
    assert len(speeds["GPU0"]) == 18 and set(speeds["GPU0"]) == {26.562}
    assert sum(speeds["GPU1"]) == pytest.approx(478.1, abs=0.05)


def test_every_legend_word_has_one_kind_of_path_and_pairs_sort_fastest_first():
    for word in ("X", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"):
        assert topology.link_class(word) in topology.LINK_CLASSES
    t = topology.from_links([["X", "SYS", "NV4"], ["SYS", "X", "PIX"], ["NV4", "PIX", "X"]])
    assert [w for _, _, w in topology.pairs(t)] == ["NV4", "PIX", "SYS"]


def test_nvlink_speeds_text_without_links_is_rejected():
    with pytest.raises(ValueError, match="nvlink -s"):
        topology.parse_nvlink_speeds("No devices were found\n")
