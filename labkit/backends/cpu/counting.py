"""Counting: a launch on the counting build (include/labkit_count.h), with Nsight Compute's counters.

Inside ``session()``, every launch of the CPU executor runs on a build of its module that records
each memory access of each thread and the basic blocks each thread runs; the launch's results are
the same as without counting.  Each launch gives one record: the kernel, its grid and block, and
Nsight Compute's metrics by name (``METRICS``), with ``notes`` saying what each model counts.

FP32 instructions: the counting build is compiled with fused multiply-add contraction, as nvcc
compiles (``a*b + c`` is one FFMA); the executed count of each basic block (its hook's calls, or
those of the first access hook in it: sited_blocks) times the single-precision add/subtract,
multiply and fused multiply-add instructions the host compiler put in it (read from the
disassembly) is the count.  The maths a GPU expands into FFMA, FADD and FMUL sequences counts as
those sequences (GPU_EXPANSION: a division, a square root, expf, logf, __expf, __fdividef); other
maths calls (tanhf, sinf, powf, ...) are not counted, and the record says how many ran.  A constant
multiply the host turns into an add (``x * 2`` as ``x + x``) counts as an add.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import re
import shutil
import struct
import subprocess
from pathlib import Path

from ...errors import BarrierError, LaunchError
from .compiler import counting_arch_flags

GLOBAL = ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
          "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
SHARED = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
          "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
          "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
          "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
FP32 = ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum")
DRAM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
METRICS = GLOBAL + SHARED + FP32 + DRAM
TOTALS = GLOBAL + SHARED      # labkit_count_totals' order (include/labkit_count.h, Metric), then DRAM sectors
SECTOR = 32

NOTES = {
    "warps": "32 threads of consecutive linear thread index; one warp instruction is the k-th execution of "
             "an access instruction by each lane that executed it",
    "global": "one request per warp instruction; sectors: distinct 32-byte sectors its lanes touch, counted from "
              "the start of the array (a GPU's allocations are 256-byte aligned); atomics not counted",
    "shared": "32 banks of 4 bytes; lanes reading one 32-bit word share it; 64- and 128-bit accesses in 2 phases "
              "of 16 lanes; a phase costs as many wavefronts as its busiest bank has distinct words; bank "
              "conflicts: wavefronts beyond the fewest that could move each phase's distinct words (32 per "
              "wavefront); a thread's 32-bit loads of neighbouring, aligned words in one stretch count as the "
              "one 64- or 128-bit load nvcc makes of them (alignment as the launch has it, where nvcc proves it)",
    "dram": "compulsory traffic: each distinct 32-byte sector read once, each written once (an L2 that holds "
            "the launch's data, cold at its start; an H100's holds 50 MB); a lower bound where the data is larger, "
            "which an L2 model could not fix here, the executor's order of accesses not being a GPU's; "
            "__constant__ memory and the kernel's code not counted.  The writes are what reaches DRAM in the end: "
            "a profiler counts only what does during the launch, none where the footprint fits the L2 "
            "(write-back; labkit.measure.counters.l2_resident)",
    "footprint": "footprint_bytes: the distinct 32-byte sectors the launch reads or writes, in bytes",
    "fp32": "executed single-precision add/sub (fadd), mul (fmul) and fused multiply-add (ffma) instructions of "
            "the kernel's code, compiled with FMA contraction as nvcc does; a division, square root, expf, logf, "
            "__expf and __fdividef count as the FFMA, FADD and FMUL instructions of nvcc 13's sm_90 code for "
            "them on a normal, finite argument (their slow paths for denormals, infinities and huge quotients "
            "not counted); other maths calls (tanhf, sinf, powf, ...) not counted",
}

_records: list[dict] | None = None     # the open session's records; None outside one
_trace: dict | None = None             # the open session's warp to keep the accesses of (session(trace=))
KIND_NAMES = ("global load", "global store", "shared load", "shared store")   # labkit_count.h's Kind
MAX_TRACED = 1 << 16                   # labkit_count.h's MAX_TRACED

# nvcc honours `#pragma unroll` (bare: unroll fully a loop whose trip count it knows); GCC ignores it.
# The counting build unrolls where nvcc does, as GCC's own pragma: its code is then nearer the GPU's,
# and it runs one basic block (one counting hook) per unrolled body, not per iteration.
_UNROLL = re.compile(r"^([ \t]*)#[ \t]*pragma[ \t]+unroll\b[ \t]*(.*?)[ \t]*$", re.M)
FULL_UNROLL = 64      # GCC's pragma needs a factor: a bare pragma's loops in these kernels are shorter


def unrolled_as_nvcc(tu: str) -> str:
    """The translation unit with each `#pragma unroll [n]` as `#pragma GCC unroll n` (n: a constant
    expression, as nvcc's; FULL_UNROLL where none is given)."""
    return _UNROLL.sub(lambda m: f"{m.group(1)}#pragma GCC unroll {m.group(2) or FULL_UNROLL}", tu)


@contextlib.contextmanager
def session(trace: dict | None = None):
    """Count every launch of the CPU executor made inside; yields the list of records, filled as
    launches run.  ``trace``: {"launch": k, "block": (x, y, z), "warp": w}: launch k's record also
    gets ``warp_accesses``, that warp's accesses (warp_accesses' rows)."""
    global _records, _trace
    if _records is not None:
        raise RuntimeError("labkit.counters: already counting (a call inside the function being counted)")
    _records, _trace = [], trace
    try:
        yield _records
    finally:
        _records, _trace = None, None


def _traced(lib, names: list[str]) -> list[dict]:
    """The kept warp's accesses (labkit_count_traced), one row per lane per warp instruction:
    ``instruction`` (its order in the warp), ``lane``, ``kind`` (KIND_NAMES), ``array`` (which
    argument or __device__ variable; shared: "shared"), ``offset`` (bytes from the array's start)
    and ``size`` (bytes)."""
    lib.labkit_count_traced.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.labkit_count_traced.restype = ctypes.c_size_t
    out = (ctypes.c_uint64 * (6 * MAX_TRACED))()
    n = min(int(lib.labkit_count_traced(out, MAX_TRACED)), MAX_TRACED)
    rows = []
    for i in range(n):
        instr, lane, kind, region, offset, size = (int(v) for v in out[6 * i:6 * i + 6])
        if kind >= 2:
            array = "shared" if region == 0 else f"__shared__ #{region}"
        else:
            array = names[region] if region < len(names) else f"region {region}"
        rows.append({"instruction": instr, "lane": lane, "kind": KIND_NAMES[kind], "array": array,
                     "offset": offset, "size": size})
    return rows


def active() -> bool:
    return _records is not None


# --- FP32 instructions per basic block, from the disassembly ----------------------------------------
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_HOOK = re.compile(r"<_*sanitizer_cov_trace_pc(@plt)?>")
_X86 = {"ffma": re.compile(r"^v?f(?:n)?m(?:add|sub)(?:132|213|231)(ss|ps)$"),
        "fadd": re.compile(r"^v?(?:add|sub)(ss|ps)$"),
        "fmul": re.compile(r"^v?mul(ss|ps)$")}
_ARM = {"ffma": re.compile(r"^f(?:n)?m(?:add|sub)$"), "fadd": re.compile(r"^f(?:add|sub)$"),
        "fmul": re.compile(r"^fmul$")}
# FP32 work a GPU does with FFMA/FMUL sequences that the host does otherwise: a division, a square
# root, a call to a maths function.  KINDS' last, "other", counts the calls that are not modelled, to
# say where counts fall short.
KINDS = ("ffma", "fadd", "fmul", "other")
# What a GPU executes for one of them, as (FFMA, FADD, FMUL): nvcc 13's sm_90 SASS on a normal, finite
# argument, the path nearly every argument takes (their slow paths, for denormals, infinities and
# huge quotients, are not counted):
#   division    MUFU.RCP, then 5 FFMA refining the quotient (FCHK sends the rare operands elsewhere)
#   sqrtf       MUFU.RSQ, 2 FMUL, 2 FFMA
#   expf        FFMA.SAT, FFMA.RM, FADD, 2 FFMA, MUFU.EX2 and a last FMUL: that FMUL is the counting
#               build's own multiply after the call (labkit_cpu.h's counted expf), which the host
#               compiler fuses with an add that follows, as nvcc fuses it (sum += expf(x): an FFMA)
#   logf        FADD, 11 FFMA (the polynomial among them), FMUL
# __expf and __fdividef (MUFU and one FMUL on a GPU) are the counting build's quiet call and its
# multiply; a quiet call is an indirect one, not seen here.  The square root's call after sqrtss is
# the host library's errno path for a negative argument: not counted again.
GPU_EXPANSION = {"div": (5, 0, 0), "sqrt": (2, 0, 2), "expf": (4, 1, 0), "logf": (11, 1, 1), "sqrtf": (0, 0, 0)}
_OTHER_X86 = {"div": re.compile(r"^v?divss$"), "sqrt": re.compile(r"^v?sqrtss$")}
_OTHER_ARM = {"div": re.compile(r"^fdiv$"), "sqrt": re.compile(r"^fsqrt$")}
_MATH_CALL = re.compile(r"<_*(exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|sin|cos|tan|sinh|cosh|tanh|asin|acos|"
                        r"atan|atan2|erf|erfc|sqrt|cbrt|fmod|hypot|sincos|lgamma|tgamma)f(?:@plt)?>")


def _fp_kind(mnemonic: str, operands: str) -> tuple[int, ...] | None:
    """The thread instructions of each of KINDS that one host instruction stands for, or None where it is
    no FP32 add, mul, FMA, division, square root or maths call."""
    expansion = None
    for name, pattern in _OTHER_X86.items():
        if pattern.match(mnemonic):
            expansion = GPU_EXPANSION[name]
    for name, pattern in _OTHER_ARM.items():
        if pattern.match(mnemonic) and re.match(r"s\d", operands.strip()):
            expansion = GPU_EXPANSION[name]
    call = _MATH_CALL.search(operands) if mnemonic.startswith(("call", "bl")) else None
    if call:
        expansion = GPU_EXPANSION.get(call.group(1) + "f")
        if expansion is None:
            return (0, 0, 0, 1)
    if expansion is not None:
        return (*expansion, 0)
    for kind, pattern in _X86.items():
        m = pattern.match(mnemonic)
        if m:
            packed = m.group(1) == "ps"
            n = (8 if "%ymm" in operands else 4) if packed else 1
            return tuple(n if k == kind else 0 for k in KINDS)
    for kind, pattern in _ARM.items():
        if pattern.match(mnemonic) and re.match(r"s\d", operands.strip()):
            return tuple(1 if k == kind else 0 for k in KINDS)
    return None


# The access hooks that log an access (labkit_interleave.h's LABKIT_ON_ACCESS), not the atomics'.
_ACCESS_HOOK = re.compile(r"<__tsan_(?:unaligned_|volatile_)?(?:read|write)(?:1|2|4|8|16|_range)(?:@plt)?>")
_JUMP = re.compile(r"^(?:(?:notrack|bnd)\s+)?j[a-z]*$")


@functools.lru_cache(maxsize=64)
def _disassembled(so: str) -> tuple[dict[int, tuple[int, ...]], int, int, tuple[tuple[int, int, int], ...],
                                    dict[int, int]]:
    """fp_table's three; each call of the coverage hook: (its address, the hook's, the next
    instruction's: the block it starts); and sited_blocks."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise FileNotFoundError("objdump (GNU binutils) is not installed")
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", so], capture_output=True, text=True,
                          check=True).stdout
    table: dict[int, list[int]] = {}
    starts = []
    calls = []
    block = None            # the block the instructions now read belong to
    after_hook = None       # the previous instruction called the hook (its address, the hook's): this one starts a block
    # Each block's first access hook call, where no jump comes before it in the block: (the call's
    # address, the next instruction's: the site the hook is told); the function each block is in;
    # every jump's target; the functions with a jump whose target is not written out.
    first_access: dict[int, tuple[int, int]] = {}
    function_of: dict[int, int] = {}
    targets: set[int] = set()
    unknown_jumps: set[int] = set()
    function = 0
    straight = False        # no jump yet in this block, nor an access hook's call
    access_call = None      # the previous instruction called an access hook, in a block still straight
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            if line.endswith(">:"):       # a function's start
                block, straight, access_call = None, False, None
                function += 1
            continue
        addr, mnemonic, operands = int(m.group(1), 16), m.group(2), m.group(3)
        if access_call is not None:
            first_access[block] = (access_call, addr)
            access_call = None
        if after_hook is not None:
            calls.append((*after_hook, addr))
            block, after_hook = addr, None
            table.setdefault(block, [0] * len(KINDS))
            starts.append(addr)
            function_of[block] = function
            straight = True
        if _JUMP.match(mnemonic) or (mnemonic in ("notrack", "bnd") and operands.lstrip().startswith("j")):
            target = re.match(r"\s*(?:j[a-z]*\s+)?([0-9a-f]+)\s+<", operands)
            if target:
                targets.add(int(target.group(1), 16))
            else:
                unknown_jumps.add(function)
            straight = False
        if mnemonic.startswith("ret"):
            straight = False
        if mnemonic.startswith(("call", "bl")) and _HOOK.search(operands):
            target = re.match(r"\s*([0-9a-f]+)\b", operands)
            after_hook = (addr, int(target.group(1), 16) if target else -1)
            straight = False
            continue
        if straight and mnemonic.startswith("call") and _ACCESS_HOOK.search(operands):
            access_call, straight = addr, False
            continue
        fp = _fp_kind(mnemonic, operands)
        if fp and block is not None:
            table[block] = [a + b for a, b in zip(table[block], fp)]
    table = {k: tuple(v) for k, v in table.items() if any(v)}
    sited = {b: site for b, (call, site) in first_access.items()
             if b in table and function_of[b] not in unknown_jumps and not any(b <= t <= call for t in targets)}
    return table, min(starts, default=0), max(starts, default=-1) + 1, tuple(calls), sited


def fp_table(so: str) -> tuple[dict[int, tuple[int, ...]], int, int]:
    """({address in the file of a basic block (after its coverage hook's call): its count of each of
    KINDS},
    the lowest block address, one past the highest).  A block's instructions run from its hook's call
    to the next block's."""
    return _disassembled(so)[:3]


def hooked_blocks(so: str) -> set[int]:
    """The blocks whose hook ``so`` calls (a lean build: those left)."""
    return {block for _at, _hook, block in _disassembled(so)[3]}


def sited_blocks(so: str) -> dict[int, int]:
    """{address of a block with FP32 instructions (fp_table's): the site (the address after the call)
    of the access hook that it calls before any jump}: each run of the block is one call of that
    hook, which the counting build counts as it logs accesses (labkit_count_sites), so the block's
    own hook can go (lean_build).  Not where a jump lands inside the block before that call, nor in a
    function with a jump whose target objdump does not write out (through a table)."""
    return _disassembled(so)[4]


# The coverage hook runs at every basic block, and only the runs of blocks with FP32 instructions
# (or the divisions and maths calls noted beside them) count: in the others, its call can be a
# no-op of the same length, and the block's count stays 0 (in the implicit GEMM rung, 98% of the
# blocks that run).  So can it in a block whose runs its access hook's calls count (sited_blocks:
# the naive rung's inner loop, one FMA and two loads).  x86-64 only: there the call is 5 bytes, E8
# and a 32-bit displacement.
_NOP5 = bytes.fromhex("0f1f440000")      # nopl 0x0(%rax,%rax,1)
LEAN_SCHEME = 2       # which calls lean_build silences: part of its file's name
_PT_LOAD, _PF_X = 1, 1


def _code_offset(elf: bytes, addr: int) -> int | None:
    """Where the byte at address ``addr`` of a 64-bit little-endian ELF's executable segments lies in
    its file; None where no such segment holds it."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type == _PT_LOAD and p_flags & _PF_X and p_vaddr <= addr < p_vaddr + p_filesz:
            return addr - p_vaddr + p_offset
    return None


def lean_build(so: str) -> Path | None:
    """The counting build ``so`` with the coverage hook's call a no-op in each basic block that has
    nothing to count (fp_table) or whose runs its access hook's calls count (sited_blocks), made once
    beside it; None where it is not made (not x86-64, no
    disassembly, or a call not as expected: then ``so`` itself serves, every block counted)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    src = Path(so)
    out = src.with_name(src.stem + f"-lean{LEAN_SCHEME}.so")
    if out.exists():
        return out
    try:
        table, _lo, _hi, calls, sited = _disassembled(so)
        elf = bytearray(src.read_bytes())
    except (OSError, subprocess.CalledProcessError):
        return None
    for at, hook, block in calls:
        if block in table and block not in sited:
            continue
        off = _code_offset(elf, at)
        if block - at != 5 or off is None or elf[off] != 0xE8:
            return None
        if at + 5 + struct.unpack_from("<i", elf, off + 1)[0] != hook:
            return None
        elf[off:off + 5] = _NOP5
    tmp = out.with_name(f".{out.name}.{os.getpid()}")
    tmp.write_bytes(elf)
    os.replace(tmp, out)       # atomic: a concurrent build of the same file is harmless
    return out


def _blocks(so: str):
    """fp_table(so), or ({}, 0, 0) and why FP32 instructions cannot be counted here."""
    if platform.machine() in ("x86_64", "AMD64") and "-mfma" not in counting_arch_flags():
        return ({}, 0, 0), "not counted: this processor has no FMA instructions, so a*b+c cannot be counted as one"
    try:
        return fp_table(so), NOTES["fp32"]
    except (OSError, subprocess.CalledProcessError) as exc:
        return ({}, 0, 0), f"not counted: the disassembly could not be read ({exc})"


def _fp_counts(lib, blocks, sited: dict[int, int]) -> list[int]:
    """The launch's thread instructions of each of KINDS: each block's runs times its instructions;
    a sited block's runs are its access hook's calls (labkit_count_site_calls, in sited's order)."""
    table, lo, hi = blocks
    hits = (ctypes.c_uint64 * ((hi - lo) // 4 + 1))()     # one counter per 4 bytes (labkit_count.h)
    lib.labkit_count_blocks(hits)
    site_calls = (ctypes.c_uint64 * max(1, len(sited)))()
    lib.labkit_count_site_calls(site_calls)
    index = {b: i for i, b in enumerate(sited)}
    out = [0] * len(KINDS)
    for pc, fp in table.items():
        runs = site_calls[index[pc]] if pc in index else hits[(pc - lo) // 4]
        for i, c in enumerate(fp):
            out[i] += c * runs
    return out


def _declare(lib) -> None:
    lib.labkit_count_begin.argtypes = [ctypes.c_uint64] * 2
    lib.labkit_count_region.argtypes = [ctypes.c_uint64] * 3
    lib.labkit_count_region.restype = ctypes.c_bool
    lib.labkit_count_constant.argtypes = [ctypes.c_uint64] * 2
    lib.labkit_count_totals.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.labkit_count_blocks.argtypes = [ctypes.c_void_p]
    lib.labkit_count_sites.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.labkit_count_site_calls.argtypes = [ctypes.c_void_p]
    lib.labkit_count_base.restype = ctypes.c_uint64
    lib.labkit_error.restype = ctypes.c_char_p


def _origin(arr) -> int:
    """Where the allocation that ``arr`` views starts: a GPU aligns allocations, not views."""
    base = arr
    while getattr(base, "base", None) is not None and hasattr(base.base, "__array_interface__"):
        base = base.base
    start = base.__array_interface__["data"][0]
    here = arr.__array_interface__["data"][0]
    return start if start <= here else here


def run(fn, cfg, packed, so: str, lib) -> dict:
    """Run one launch of `fn` (a CPUFunction) on its module's counting build (`so`, loaded as `lib`),
    with the arrays and symbols of `packed` and the module; append its record to the session's."""
    _declare(lib)
    blocks, fp_note = _blocks(so)
    base = lib.labkit_count_base()
    lib.labkit_count_begin(base + blocks[1], base + blocks[2])
    # The blocks whose runs their access hooks' calls count (the lean build has not their own hooks;
    # where it is not the one loaded, the calls count them all the same).
    sited = sited_blocks(so) if blocks[2] > blocks[1] else {}
    lib.labkit_count_sites((ctypes.c_uint64 * max(1, len(sited)))(*(base + s for s in sited.values())), len(sited))

    def region(lo: int, hi: int, origin: int) -> None:
        if not lib.labkit_count_region(lo, hi, origin):
            raise LaunchError(f"labkit.counters: kernel '{fn.name}' is passed more arrays (with the module's "
                              "__device__ variables) than counting can tell apart (255)")
    names = []             # each region's array, for a warp's trace
    for i, (_obj, arr) in enumerate(packed):
        if arr is not None and arr.nbytes:
            lo = arr.__array_interface__["data"][0]
            region(lo, lo + arr.nbytes, _origin(arr))
            names.append(f"argument {i}")
    # The counting build is a library of its own: its __constant__ and __device__ variables take the
    # module's values before the launch, and give the __device__ ones back after it.
    symbols = list(fn.module.symbols.values())
    addrs = []
    for i, s in enumerate(symbols):
        getter = getattr(lib, f"labkit_sym_{i}")
        getter.restype = ctypes.c_void_p
        addrs.append(getter())
        ctypes.memmove(addrs[i], s.ptr, s.nbytes)
        if not s.constant:
            region(addrs[i], addrs[i] + s.nbytes, addrs[i])
            names.append(f"__device__ {list(fn.module.symbols)[i]}")
        else:
            lib.labkit_count_constant(addrs[i], addrs[i] + s.nbytes)
    tracing = _trace is not None and _records is not None and _trace["launch"] == len(_records)
    if tracing:
        lib.labkit_count_trace.argtypes = [ctypes.c_uint] * 4
        lib.labkit_count_trace(*(int(v) for v in _trace["block"]), int(_trace["warp"]))
    launch = getattr(lib, f"labkit_launch_{fn.index}")
    launch.restype = ctypes.c_int
    ptrs = (ctypes.c_void_p * max(1, len(packed)))(*[ctypes.addressof(obj) for obj, _ in packed])
    cfg.flags &= ~2          # the shuffled schedule is a check of its own; counting runs the plain one
    rc = launch(ctypes.byref(cfg), ptrs)
    err = lib.labkit_error().decode()
    # The workers keep their stacks for the next launch (module._held bounds how many modules do).
    if rc == 2:
        raise KeyboardInterrupt(err)
    if rc != 0:
        raise (BarrierError if ("barrier" in err or "deadlock" in err) else LaunchError)(err)
    for s, addr in zip(symbols, addrs):
        if not s.constant:
            ctypes.memmove(s.ptr, addr, s.nbytes)
    totals = (ctypes.c_uint64 * (len(TOTALS) + 3))()
    lib.labkit_count_totals(totals)
    fp = _fp_counts(lib, blocks, sited) if blocks[2] > blocks[1] else [None] * len(KINDS)
    if fp[-1]:
        fp_note += (f"; short for this launch: its threads ran {fp[-1]} maths calls (tanhf, sinf, powf, ...) "
                    "which a GPU computes with FFMA and FMUL instructions not counted here")
    record = {"kernel": fn.name, "grid": tuple(cfg.grid), "block": tuple(cfg.block),
              "shared_mem": int(cfg.shared_mem)}
    record.update(zip(TOTALS, (int(v) for v in totals[:len(TOTALS)])))
    record.update(zip(FP32, fp))
    record.update(zip(DRAM, (SECTOR * int(totals[len(TOTALS)]), SECTOR * int(totals[len(TOTALS) + 1]))))
    record["footprint_bytes"] = SECTOR * int(totals[len(TOTALS) + 2])
    record["notes"] = {**NOTES, "fp32": fp_note}
    if tracing:
        record["warp_accesses"] = _traced(lib, names)
    if _records is not None:
        _records.append(record)
    return record
