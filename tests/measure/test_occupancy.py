"""Occupancy arithmetic (mgpu_helpers.models.occupancy): pure, so tested without numba, CuPy or a GPU.

The figures are those of the CUDA occupancy calculator (cuda_occupancy.h) for Hopper (compute capability 9.0);
on a GPU, notebook 02 checks the same function against the driver's own occupancy query."""

import subprocess
import sys

import pytest

from mgpu_helpers.models import occupancy as occ


def test_importing_the_model_imports_neither_numba_nor_cupy():
    code = (
        "import sys, mgpu_helpers.models.occupancy as o; o.occupancy(256, 32); "
        "print(sorted(m for m in ('numba', 'cupy', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_occupancy_matches_the_cuda_occupancy_calculator_on_hopper():
    # 32 registers, 256 threads: 8 blocks fill all 64 warps.
    o = occ.occupancy(256, 32)
    assert (o.blocks_per_sm, o.active_warps, o.fraction, o.limiter) == (8, 64, 1.0, "threads")
    # 33 registers round up to 40 per thread (1280 per warp); each quarter of the register file (16384) holds
    # 12 such warps, so 48 warps per SM: 12 blocks of 4 warps, 24 blocks of 2 warps (75%, not 51/64).
    assert occ.occupancy(128, 33).blocks_per_sm == 12
    assert occ.occupancy(64, 40).blocks_per_sm == 24 and occ.occupancy(64, 40).fraction == 0.75
    # 168 registers: 5376 per warp, 3 warps per quarter -> 12 warps: one block of 256 (8 warps), none of 512
    assert occ.occupancy(256, 168).blocks_per_sm == 1 and not occ.occupancy(512, 168).launchable
    # manyRegs on sm_90 (167 registers): 3 warps per quarter, so at most 12 warps = 384 threads per block.
    assert occ.occupancy(384, 167).launchable and not occ.occupancy(416, 167).launchable
    # 64 registers: half the warps at any block size; block 32 hits the 32-blocks-per-SM limit.
    assert occ.occupancy(1024, 64).fraction == 0.5
    assert occ.occupancy(32, 16).limiter == "blocks" and occ.occupancy(32, 16).fraction == 0.5
    # The seed's "block too large": 65+ registers x 1024 threads do not fit in one SM's 64K registers.
    big = occ.occupancy(1024, 65)
    assert not big.launchable and "cannot launch" in big.limiter
    assert occ.occupancy(256, 65).launchable
    assert not occ.occupancy(1025, 16).launchable


def test_a_block_of_an_odd_size_still_takes_whole_warps():
    # 100 threads are 4 warps (the 4th with 4 threads): 16 blocks fill 64 warps.
    o = occ.occupancy(100, 16)
    assert (o.blocks_per_sm, o.active_warps) == (16, 64)


def test_occupancy_shared_memory_limit():
    o = occ.occupancy(128, 32, smem_per_block=100 * 1024)  # + 1 KB reserved per block: 2 fit in 228 KB
    assert o.blocks_per_sm == 2 and o.limiter == "shared memory"
    assert occ.occupancy(128, 32, smem_per_block=114 * 1024).blocks_per_sm == 1


def test_other_limits_change_the_answer():
    # An SM with 1536 threads and 16 blocks (compute capability 8.6): block 1024 fits once, block 32 16 times.
    ampere = occ.SmLimits(max_threads_per_sm=1536, max_blocks_per_sm=16, sm_count=84)
    assert occ.occupancy(1024, 16, limits=ampere).blocks_per_sm == 1
    assert occ.occupancy(32, 16, limits=ampere).blocks_per_sm == 16
    assert occ.one_wave_blocks(256, 32, limits=ampere) == 6 * 84


def test_one_wave_is_resident_blocks_times_sms():
    assert occ.one_wave_blocks(256, 32) == 8 * 132
    assert occ.one_wave_blocks(1024, 65) == 0  # cannot launch at all


def test_spill_reservation_scales_with_resident_threads():
    # 512 bytes of local memory per thread on 132 SMs x 2048 threads: about 138 MB of device memory.
    assert occ.spill_reservation_bytes(512) == 512 * 2048 * 132


@pytest.mark.parametrize("args", [(0, 32), (256, -1), (256, 32, -1)])
def test_bad_input_is_refused_with_what_is_allowed(args):
    with pytest.raises(ValueError, match="block must be >= 1"):
        occ.occupancy(*args)


def test_recorded_registers_of_02s_kernels_give_the_lessons_occupancy_story():
    from mgpu_helpers.measure import gpu_limits

    regs = gpu_limits.recorded_registers()
    free = regs["manyRegs"]["registers"]
    bounded = regs["manyRegs_launch_bounds_1024"]
    assert regs["manyRegs"]["local_bytes"] == 0 and bounded["local_bytes"] > 0  # the bound forces a spill
    assert not occ.occupancy(1024, free).launchable  # unbounded: no 1024 block
    assert occ.occupancy(1024, bounded["registers"]).launchable and bounded["registers"] <= 64
    assert 0 < regs["seed_vecAdd_cupy"]["registers"] < free and regs["numba_vec_add"]["registers"] > 0


def test_the_lessons_blocks_per_sm_agrees_with_the_model_everywhere():
    # 02's worked fill-in (exported to mh.lessons.cupy_kernels) is the same arithmetic as the model, for every
    # block size and register count on two kinds of SM: the checker's random draws can never fail it by chance.
    from mgpu_helpers.lessons import cupy_kernels

    ampere = occ.SmLimits(max_threads_per_sm=1536, max_blocks_per_sm=16, sm_count=84)
    for lim in (occ.HOPPER, ampere):
        for block in range(1, 1026, 3):
            for regs in range(1, 256, 2):
                assert (
                    cupy_kernels.blocks_per_sm(block, regs, lim) == occ.occupancy(block, regs, limits=lim).blocks_per_sm
                )
