"""Occupancy arithmetic as the CUDA occupancy calculator (``cuda_occupancy.h``) does it: blocks of a kernel per SM,
and what a register spill reserves. Notebook 02 checks it against the driver's own answer."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    """Per-SM resources of one GPU architecture (defaults: Hopper, compute capability 9.0: H100/H200)."""

    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256  # registers are handed out per warp in units of 256
    sub_partitions: int = 4  # an SM is 4 partitions, each with its own quarter of the register file
    regs_per_block: int = 65536
    smem_per_sm: int = 228 * 1024
    smem_alloc_unit: int = 128
    smem_reserved_per_block: int = 1024  # set aside by the system for every block (compute capability >= 8.0)
    warp_size: int = 32
    sm_count: int = 132  # H200 SXM

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


HOPPER = SmLimits()


@dataclass(frozen=True)
class Occupancy:
    """What fits on one SM; ``limiter``: the resource that ran out first ("threads", "registers", "blocks", "shared
    memory"), or why the block cannot launch."""

    block: int
    regs_per_thread: int
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    limiter: str

    @property
    def fraction(self) -> float:
        return self.active_warps / self.max_warps

    @property
    def launchable(self) -> bool:
        return self.blocks_per_sm > 0


def occupancy(block: int, regs_per_thread: int, smem_per_block: int = 0, limits: SmLimits = HOPPER) -> Occupancy:
    """Resident blocks and warps per SM: the smallest of the limits set by threads, blocks, registers and shared
    memory (``smem_per_block``: static + dynamic, bytes). A block that cannot run at all gives ``blocks_per_sm ==
    0``: the launch fails with "too many resources requested for launch" ("invalid argument" past 1024 threads)."""
    if block < 1 or regs_per_thread < 0 or smem_per_block < 0:
        raise ValueError("block must be >= 1, registers and shared memory >= 0")
    lim = limits
    warps_per_block = math.ceil(block / lim.warp_size)
    if block > lim.max_threads_per_block:
        why = f"block > {lim.max_threads_per_block} threads: cannot launch"
        return Occupancy(block, regs_per_thread, 0, 0, lim.max_warps_per_sm, why)
    candidates = {"threads": lim.max_warps_per_sm // warps_per_block, "blocks": lim.max_blocks_per_sm}
    if regs_per_thread > 0:
        regs_per_warp = math.ceil(regs_per_thread * lim.warp_size / lim.reg_alloc_unit) * lim.reg_alloc_unit
        # The launch check assumes a block's warps spread over all sub-partitions (rounded up to 4 warps).
        parts = lim.sub_partitions
        assumed = regs_per_warp * (math.ceil(warps_per_block / parts) * parts)
        if assumed > lim.regs_per_block or regs_per_warp * warps_per_block > lim.regs_per_block:
            candidates["registers"] = 0
        else:
            # Registers live in the sub-partitions: whole warps per quarter, times four.
            warps_by_regs = (lim.regs_per_sm // parts // regs_per_warp) * parts
            candidates["registers"] = warps_by_regs // warps_per_block
    if smem_per_block > 0:
        smem = math.ceil(smem_per_block / lim.smem_alloc_unit) * lim.smem_alloc_unit + lim.smem_reserved_per_block
        candidates["shared memory"] = lim.smem_per_sm // smem
    limiter = min(candidates, key=lambda k: (candidates[k], list(candidates).index(k)))
    blocks = candidates[limiter]
    if blocks == 0:
        limiter = f"{limiter}: one block needs more than an SM has, cannot launch"
    return Occupancy(block, regs_per_thread, blocks, blocks * warps_per_block, lim.max_warps_per_sm, limiter)


def spill_reservation_bytes(local_bytes_per_thread: int, limits: SmLimits = HOPPER) -> int:
    """Device memory the driver sets aside for local memory (register spills, stack): every thread that can be
    resident at once gets its own slice, so it is bytes per thread x threads per SM x SMs."""
    return local_bytes_per_thread * limits.max_threads_per_sm * limits.sm_count


def one_wave_blocks(block: int, regs_per_thread: int, smem_per_block: int = 0, limits: SmLimits = HOPPER) -> int:
    """Blocks in one wave of a kernel: every SM holding as many resident blocks as fit (0 if none fits)."""
    return occupancy(block, regs_per_thread, smem_per_block, limits).blocks_per_sm * limits.sm_count
