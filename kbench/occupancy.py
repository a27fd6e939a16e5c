"""How many blocks of a kernel fit on one SM, from its registers, shared memory and threads.

The per-architecture limits are those of the CUDA C++ Programming Guide's
"Technical Specifications per Compute Capability" table (CUDA 12/13).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SMLimits:
    max_warps: int
    max_blocks: int
    registers: int  # 32-bit registers per SM
    smem_bytes: int  # shared memory per SM usable by blocks
    smem_per_block: int  # largest opt-in shared memory of one block
    reserved_smem_per_block: int = 1024  # the runtime keeps 1 KB per resident block
    register_unit: int = 256  # registers are allocated per warp in units of 256


LIMITS = {
    (8, 0): SMLimits(64, 32, 65536, 164 * 1024, 163 * 1024),
    (8, 6): SMLimits(48, 16, 65536, 100 * 1024, 99 * 1024),
    (8, 9): SMLimits(48, 24, 65536, 100 * 1024, 99 * 1024),
    (9, 0): SMLimits(64, 32, 65536, 228 * 1024, 227 * 1024),
}


def blocks_per_sm(threads: int, registers_per_thread: int, smem_per_block: int,
                  capability: tuple[int, int] = (9, 0)) -> dict:
    """Resident blocks per SM and what limits them, plus the warp occupancy."""
    lim = LIMITS[tuple(capability)]
    warps = -(-threads // 32)
    regs_per_warp = -(-registers_per_thread * 32 // lim.register_unit) * lim.register_unit
    by = {
        "warps": lim.max_warps // warps,
        "blocks": lim.max_blocks,
        "registers": lim.registers // (regs_per_warp * warps) if registers_per_thread else lim.max_blocks,
        "shared memory": (lim.smem_bytes // (smem_per_block + lim.reserved_smem_per_block)
                          if smem_per_block <= lim.smem_per_block else 0),
    }
    blocks = min(by.values())
    return {
        "blocks_per_sm": blocks,
        "limited_by": [name for name, value in by.items() if value == blocks],
        "warps_per_sm": blocks * warps,
        "occupancy": blocks * warps / lim.max_warps,
    }
