"""Nsight Compute's stored H100 counts, beside labkit.counters' for the same launches (notebooks 02-05).

    stored = stored_case("ladder/naive")          # benchmarks/results/counters_h100.json, one case
    print(beside_ncu(labkit.counters(fn), stored))

benchmarks/counters_ncu.py profiled each case (the ladder's rungs on the seed model's second layer at
batch 2, the GEMM ladder, ...) with ncu on an H100 and stored ncu's values per launch; this reads them
(plain JSON, nothing in it runs) and prints them beside a notebook's own count.  The DRAM metrics are
left out: the executor counts compulsory traffic, ncu what moves during the launch, and an H100's L2
keeps a small launch's writes (benchmarks/results/counters_h100_comparison.md says where they differ).
"""
from __future__ import annotations

from ..results import shipped
from ..backends.cpu import counting

__all__ = ["NCU_FILE", "SHOWN", "stored_case", "beside_ncu"]

NCU_FILE = "counters_h100.json"
# What each shown metric counts, in words (the rows' labels).
SHOWN = {
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global loads: requests (warp instructions)",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global loads: 32-byte sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global stores: requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "global stores: 32-byte sectors",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared loads: wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared loads: bank conflicts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "shared stores: wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared stores: bank conflicts",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": "FFMA (thread instructions)",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": "FADD (thread instructions)",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": "FMUL (thread instructions)",
}
assert set(SHOWN) <= set(counting.METRICS)


def _dims(v) -> tuple:
    """A grid or block as a tuple of ints (ncu's side stores "(2, 16, 4)")."""
    if isinstance(v, str):
        return tuple(int(p) for p in v.strip("()[] ").split(",") if p.strip())
    return tuple(int(p) for p in v)


def stored_case(case: str, name: str = NCU_FILE) -> dict:
    """One case of the stored ncu run: ``case``, ``device``, ``ncu_version``, ``date``, ``batch``,
    ``environment`` (the settings both sides ran under), ``launches``: per launch ``kernel``,
    ``grid``, ``block`` and ``ncu`` (metric: value)."""
    data = shipped(name)
    cases = {c.get("case"): c for c in data.get("cases", [])}
    if case not in cases:
        raise KeyError(f"stored_case: {name} has no case {case!r}; it has {', '.join(map(str, cases))}")
    launches = []
    for rec in cases[case].get("ncu") or []:
        launches.append({"kernel": rec["kernel"], "grid": _dims(rec["grid"]), "block": _dims(rec["block"]),
                         "ncu": {k: rec[k] for k in counting.METRICS if isinstance(rec.get(k), (int, float))}})
    if not launches:
        raise ValueError(f"stored_case: case {case!r} of {name} holds no ncu values (a dry run?)")
    return {"case": case, "device": data.get("device"), "ncu_version": data.get("ncu_version"),
            "date": data.get("date"), "batch": data.get("batch"), "environment": data.get("environment", {}),
            "launches": launches}


def _num(v) -> str:
    return f"{v:,}" if isinstance(v, int) else "-" if v is None else f"{v:,.0f}"


def beside_ncu(records: list[dict], stored: dict, metrics=None) -> str:
    """A text table per launch: each of ``metrics`` (default: SHOWN's) as labkit.counters counted it
    (``records``) and as ncu counted it (``stored``, from stored_case), and their ratio.  A launch
    whose kernel, grid or block differs from the stored one is said to, not compared as if it were
    the same."""
    metrics = list(SHOWN if metrics is None else metrics)
    unknown = [m for m in metrics if m not in counting.METRICS]
    if unknown:
        raise ValueError(f"beside_ncu: not a labkit.counters metric: {', '.join(unknown)}")
    launches = stored["launches"]
    out = [f"labkit.counters (CPU executor, here) beside ncu on the {stored['device']} (stored, "
           f"{stored['case']}, batch {stored['batch']}, {stored['date']})"]
    if len(records) != len(launches):
        out.append(f"  {len(records)} launches counted here, {len(launches)} stored: not the same launches")
    for i, (rec, ncu) in enumerate(zip(records, launches)):
        same = (rec["kernel"], _dims(rec["grid"]), _dims(rec["block"])) == (ncu["kernel"], ncu["grid"], ncu["block"])
        out.append(f"launch {i}: {rec['kernel']} grid {_dims(rec['grid'])} block {_dims(rec['block'])}"
                   + ("" if same else f"  -- NOT the stored launch ({ncu['kernel']} grid {ncu['grid']} "
                                      f"block {ncu['block']}): the values are not comparable"))
        rows = [("", "labkit.counters", "ncu (H100)", "here / ncu")]
        for m in metrics:
            here, there = rec.get(m), ncu["ncu"].get(m)
            ratio = (f"{here / there:.2f}" if isinstance(here, (int, float)) and there else
                     "equal" if here == there == 0 else "-")
            rows.append((SHOWN.get(m, m), _num(here), _num(there), ratio))
        w = [max(len(r[j]) for r in rows) for j in range(4)]
        out += ["  " + r[0].ljust(w[0]) + "  " + "  ".join(c.rjust(wj) for c, wj in zip(r[1:], w[1:])) for r in rows]
    return "\n".join(out)
