#!/usr/bin/env python3
"""Nsight Compute on a decode step at one batch size: the ReplaySSM non-flush launch, the
fold launch that runs beside it and finds no row to fold, and the standard kernel (the
batch-8/32 items of ``benchmarks/README.md``, "Open performance work"). Both families'
models by default (``--models`` picks). GDN's non-flush and fold launches are one kernel,
which a record's ``order`` within its step tells apart: the non-flush launch comes first
where the fold is its programmatic dependent (small batches), the fold where it goes on
the side stream (``ops.launch.fold_side_stream``: Qwen3.5-4B at batch 128, for one), and
the grid and block sizes (the launch configs') say which is which.

Two jobs. As ncu's target it runs, for each model, one ``output_only`` step with every
cursor at ``w = 0`` and one at ``w = 14`` (no row flushes: the fold launch returns at
once in each of its programs), then one standard step, the table's launch configs, each
in an NVTX range; only those launches are profiled (``--profile-from-start off``).
With ``--summarize`` it reads ncu's CSV pages and writes one record a profiled launch
(duration, DRAM throughput, registers, grid, waves an SM, occupancy). ``--cursors 15``
profiles a flush step instead (every row folds).

    ncu --profile-from-start off --nvtx --section SpeedOfLight --section LaunchStats \\
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \\
        --csv --page details python benchmarks/ncu_small_batch.py --batch 32 > ncu_b32.csv
    python benchmarks/ncu_small_batch.py --summarize ncu_b8.csv ncu_b32.csv ncu_b128.csv \\
        --gpu "NVIDIA H100 80GB HBM3" --out benchmarks/results/small_batch_ncu.json

ncu runs each launch alone with its clocks locked to base, so the durations are longer
than a CUDA graph's (``bench_mamba2_ar.py``); the waves and occupancies are what to read.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path
from typing import Dict, List

MODELS = ("nemotron-3-nano-4b", "nemotron-3-super", "qwen3.5-4b", "qwen3.5-122b")
STEP_KERNELS = ("_replay_", "_selective_state_update", "_gdn_update")  # not the cursor fills between the steps
CURSORS = (0, 14)
RANGE = re.compile(r"<default domain>:(?P<model>[\w.-]+)_b(?P<batch>\d+)_(?P<what>w\d+|std):")
METRICS = {  # record field: ncu metric name
    "duration_us": "Duration",
    "dram_throughput_pct": "DRAM Throughput",
    "registers_per_thread": "Registers Per Thread",
    "grid_size": "Grid Size",
    "block_size": "Block Size",
    "waves_per_sm": "Waves Per SM",
    "achieved_occupancy_pct": "Achieved Occupancy",
    "theoretical_occupancy_pct": "Theoretical Occupancy",
    "block_limit_registers": "Block Limit Registers",
    "warp_cycles_per_issued_instruction": "Warp Cycles Per Issued Instruction",
}
TIME_UNITS_IN_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def run_target(batch: int, models, cursors=CURSORS, buffer_len: int = 16) -> None:
    """The launches ncu profiles (see the module docstring), on the benchmark's rig of each
    model's family (its first layer): the step inputs in TensorRT-LLM's layout, random
    checkpoints and rings."""
    import torch

    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.rigs import make_model_rig

    for name in models:
        rig = make_model_rig(name, batch, buffer_len, torch.float32)

        def replay(w: int) -> None:
            rig.cache.write_pos.fill_(w)  # every row at w < L - 1: no row flushes (w = L - 1: every row)
            rig.layer_step(Launch("output_only"), 0)

        steps = [*((f"w{w}", lambda w=w: replay(w)) for w in cursors),
                 ("std", lambda: rig.layer_step(Launch("standard"), 0))]
        for _ in range(3):  # compiled and warm before the profiled range
            for _, step in steps:
                step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for what, step in steps:
            torch.cuda.nvtx.range_push(f"{name}_b{batch}_{what}")
            step()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def summarize(paths: List[str], gpu: str, commit: str) -> List[Dict]:
    """One record a profiled step launch (either family) of ncu's ``--csv --page details`` output."""
    launches: Dict[tuple, Dict] = {}
    order: Dict[tuple, int] = {}  # launches seen so far in each NVTX range
    for path in paths:
        rows = list(csv.reader(Path(path).read_text().splitlines()))
        start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
        header = rows[start]
        range_col = next(c for c in header if c.startswith("thread Domain:Push/Pop_Range"))
        for values in rows[start + 1:]:
            row = dict(zip(header, values))
            kernel = row["Kernel Name"].split("(")[0].replace("void ", "")
            where = RANGE.search(row[range_col])
            if where is None or not any(k in kernel for k in STEP_KERNELS):
                continue
            if (path, row["ID"]) not in launches:
                in_range = (path, where.group(0))
                order[in_range] = order.get(in_range, -1) + 1
                launches[(path, row["ID"])] = dict(
                    gpu=gpu, model=where["model"], batch=int(where["batch"]), state_dtype="fp32",
                    step="standard" if where["what"] == "std" else f"output_only, every cursor at {where['what'][1:]}",
                    kernel=kernel, order=order[in_range])
            rec = launches[(path, row["ID"])]
            for field, metric in METRICS.items():
                if row["Metric Name"] == metric:
                    value = _number(row["Metric Value"])
                    if field == "duration_us":  # ncu picks the unit
                        rec[field] = round(value * TIME_UNITS_IN_US[row["Metric Unit"]], 3)
                    else:
                        rec[field] = int(value) if value == int(value) else value
    return [dict(rec, commit=commit) for rec in launches.values()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--cursors", nargs="+", type=int, default=list(CURSORS),
                    help="the cursors of the output_only steps profiled (15 with L = 16: every row flushes)")
    ap.add_argument("--summarize", nargs="+", metavar="CSV", help="ncu's CSV pages to summarise (no GPU needed)")
    ap.add_argument("--gpu", help="with --summarize: the GPU the pages were taken on")
    ap.add_argument("--commit", help="with --summarize: the commit profiled (default: this checkout's)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "small_batch_ncu.json"))
    args = ap.parse_args()
    if not args.summarize:
        run_target(args.batch, args.models, args.cursors)
        return
    if not args.gpu:
        ap.error("--summarize needs --gpu (ncu's CSV does not name it)")
    from tabulate import tabulate

    from trtllm_replayssm.benchmarking.records import git_commit

    records = summarize(args.summarize, args.gpu, args.commit or git_commit())
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([{k: v for k, v in r.items() if k not in ("gpu", "commit", "state_dtype")} for r in records],
                   headers="keys"))


if __name__ == "__main__":
    main()
