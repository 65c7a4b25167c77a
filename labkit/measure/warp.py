"""One warp's accesses, instruction by instruction: which lane touches which element, and the 32-byte
sectors (global memory) or the banks and wavefronts (shared memory) that makes (notebooks 02, 03).

    rows = labkit.measure.counters.warp_accesses(fn, block=(0, 0, 0), warp=0)
    for ins in warp_instructions(rows): print(ins["kind"], ins["sectors"] or ins["wavefronts"])
    fig = labkit.plots.warp_picture(warp_instructions(rows)[:2])

The costs follow labkit.counters' model (labkit/backends/cpu/include/labkit_count.h): a global
instruction costs the distinct sectors its lanes touch, counted from the array's start; a shared one
as many wavefronts, per phase (32 lanes for 32-bit accesses, 16 for wider ones), as its busiest bank
has distinct 4-byte words (lanes reading one word share it).
"""
from __future__ import annotations

from collections import defaultdict

__all__ = ["SECTOR", "BANKS", "warp_instructions"]

SECTOR = 32      # bytes a global memory sector holds
BANKS = 32       # shared memory banks, 4 bytes wide


def _words(offset: int, size: int) -> range:
    return range(offset // 4, (offset + max(size, 1) - 1) // 4 + 1)


def warp_instructions(rows: list[dict]) -> list[dict]:
    """``rows`` (warp_accesses') grouped per warp instruction, in order: ``instruction``, ``kind``,
    ``array``, ``size``, ``offsets`` ({lane: byte offset}), ``elements`` ({lane: offset // size}),
    and for global memory ``sectors`` (the distinct sector numbers, sorted); for shared memory
    ``banks`` ({lane: bank of its first word}), ``wavefronts`` and ``ideal`` (the fewest wavefronts
    that could move its distinct words; conflicts = wavefronts - ideal)."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["instruction"]].append(r)
    out = []
    for i in sorted(groups):
        g = sorted(groups[i], key=lambda r: r["lane"])
        kind, size = g[0]["kind"], g[0]["size"]
        offsets = {r["lane"]: r["offset"] for r in g}
        ins = {"instruction": i, "kind": kind, "array": g[0]["array"], "size": size, "offsets": offsets,
               "elements": {lane: off // max(size, 1) for lane, off in offsets.items()}}
        if kind.startswith("global"):
            ins["sectors"] = sorted({s for r in g for s in range(r["offset"] // SECTOR,
                                                                 (r["offset"] + r["size"] - 1) // SECTOR + 1)})
        else:
            per_phase = 16 if size > 4 else 32
            wavefronts = ideal = 0
            for phase in range(32 // per_phase):
                words = {w for r in g if r["lane"] // per_phase == phase for w in _words(r["offset"], r["size"])}
                if not words:
                    continue
                per_bank: dict[int, int] = defaultdict(int)
                for w in words:
                    per_bank[w % BANKS] += 1
                wavefronts += max(per_bank.values())
                ideal += (len(words) + BANKS - 1) // BANKS
            ins.update(banks={lane: (off // 4) % BANKS for lane, off in offsets.items()},
                       wavefronts=wavefronts, ideal=ideal)
        out.append(ins)
    return out
