#!/usr/bin/env python3
"""Compare fold-launch options of the output_only route on whole cycles (same method as
bench_mamba2_ar.py): the non-flush launch keeps its tuned config, the fold launch varies.

    python benchmarks/bench_mamba2_fold_options.py --batches 128 512
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.mamba2_ar import CANDIDATES, Launch, Mamba2Case, make_rig
from trtllm_replayssm.models import mamba2_model

FOLD_OPTIONS = CANDIDATES["fold"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--state-dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--out", default="mamba2_fold_options.json")
    args = ap.parse_args()
    sd = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.state_dtype]
    gpu = torch.cuda.get_device_name()
    records, rows = [], []
    for batch in args.batches:
        case = Mamba2Case(args.model, mamba2_model(args.model).geom, batch, 16, sd)
        rig = make_rig(case)
        std = rig.time_cycle_us(Launch("standard"))
        for fold in FOLD_OPTIONS:
            lc = Launch("output_only", None, fold)
            us = rig.time_cycle_us(lc)
            flush = rig.time_step_us(lc, 15)
            nonflush = rig.time_step_us(lc, 8)
            records.append(dict(gpu=gpu, model=args.model, state_dtype=args.state_dtype, batch=batch, L=16,
                                fold_config=fold.to_dict(), us_per_step=round(us, 2), baseline_us_per_step=round(std, 2),
                                speedup=round(std / us, 3), flush_us=round(flush, 1), nonflush_us=round(nonflush, 1)))
            rows.append([batch, str(fold), f"{std:.1f}", f"{us:.1f}", f"{std / us:.2f}x", f"{flush:.0f}", f"{nonflush:.1f}"])
            print(rows[-1], flush=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate(rows, headers=["batch", "fold launch", "standard us", "output_only us", "speedup", "flush step us",
                                  "non-flush step us"]))


if __name__ == "__main__":
    main()
