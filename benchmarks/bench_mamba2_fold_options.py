#!/usr/bin/env python3
"""Compare how the output_only route folds, on whole cycles (same method as
bench_mamba2_ar.py), with the flush and the non-flush step timed apart:
- ``--options fold``: two launches, the non-flush launch on its tuned config and the fold
  launch's config varied;
- ``--options fused``: one launch (``replay.FUSE_FOLD``: flush rows fold in the step
  kernel) over step-kernel configs, after the tuned two-launch route for reference.

    python benchmarks/bench_mamba2_fold_options.py --batches 128 512
    python benchmarks/bench_mamba2_fold_options.py --options fused --batches 128 512
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import git_commit
from trtllm_replayssm.benchmarking.mamba2_ar import CANDIDATES, Launch, Mamba2Case, make_rig
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.launch import LaunchConfig
from trtllm_replayssm.ops.mamba2 import replay

FOLD_OPTIONS = [LaunchConfig(*c) for c in CANDIDATES["fold"]]
# The fused step kernel holds the fold's matmul tiles: 16 rows a warp or more warps
# (sm_90 registers, ``kernel_registers.py --family mamba2``: (32, 4) 128, (16, 1) 176).
FUSED_OPTIONS = [LaunchConfig(*c) for c in [(16, 1, 4), (16, 2, 4), (16, 4, 4), (32, 4, 1), (32, 4, 4), (32, 8, 4),
                                            (64, 8, 4), (64, 4, 4)]]


def launches(option: str):
    """(label, Launch, fused) per variant of ``option``."""
    if option == "fold":
        return [(f"fold {fold}", Launch("output_only", None, fold), False) for fold in FOLD_OPTIONS]
    return [("two launches (tuned)", Launch("output_only"), False)] + \
        [(f"fused {cfg}", Launch("output_only", cfg), True) for cfg in FUSED_OPTIONS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--state-dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--options", choices=["fold", "fused"], default="fold")
    ap.add_argument("--out", default="mamba2_fold_options.json")
    args = ap.parse_args()
    sd = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.state_dtype]
    gpu = torch.cuda.get_device_name()
    records, rows = [], []
    for batch in args.batches:
        case = Mamba2Case(args.model, mamba2_model(args.model).geom, batch, 16, sd)
        rig = make_rig(case)
        std = rig.time_cycle_us(Launch("standard"))
        for label, lc, fused in launches(args.options):
            replay.FUSE_FOLD = fused
            try:
                us = rig.time_cycle_us(lc)
                flush = rig.time_step_us(lc, 15)
                nonflush = rig.time_step_us(lc, 8)
            except Exception as e:  # a config the compiler rejects
                print(label, type(e).__name__, e, flush=True)
                continue
            finally:
                replay.FUSE_FOLD = False
            records.append(dict(gpu=gpu, model=args.model, state_dtype=args.state_dtype, batch=batch, L=16,
                                variant=label, config=lc.config and lc.config.to_dict(),
                                fold_config=lc.fold_config and lc.fold_config.to_dict(), us_per_step=round(us, 2),
                                baseline_us_per_step=round(std, 2), speedup=round(std / us, 3),
                                flush_us=round(flush, 1), nonflush_us=round(nonflush, 1), commit=git_commit()))
            rows.append([batch, label, f"{std:.1f}", f"{us:.1f}", f"{std / us:.2f}x", f"{flush:.0f}",
                         f"{nonflush:.1f}"])
            print(rows[-1], flush=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate(rows, headers=["batch", "variant", "standard us", "output_only us", "speedup", "flush step us",
                                  "non-flush step us"]))


if __name__ == "__main__":
    main()
