#!/usr/bin/env python3
"""The Mamba2 fold program's loop over its heads: nested or flat, on whole cycles.

A fold program folds a block of rows' flushing rows over ``heads_per_prog`` heads, each
over its blocks of rows. Nested (``replay_fold.FLAT_HEADS = False``): a loop over heads
around a pipelined loop over the head's blocks, the head's ring weights loaded once. Flat
(True): one pipelined loop over (head, block), so the next head's loads are in flight
while this one folds. This times the output_only route with the tuned table's fold
config and a few others, each both ways: the cycle, the flush and the non-flush step
(same method as ``bench_mamba2_ar.py``).

    python benchmarks/probe_fold_flat_heads.py   # -> benchmarks/results/mamba2_fold_flat_heads.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Case, make_rig
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.launch import LaunchConfig
from trtllm_replayssm.ops.mamba2 import replay_fold

# (heads a program, rows a program); None: the tuned table's fold config
FOLD_CONFIGS = [None, (16, 2), (8, 4), (32, 1)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_fold_flat_heads.json"))
    args = ap.parse_args()
    records = []
    for sd in args.state_dtypes:
        for name in args.models:
            for batch in args.batches:
                rig = make_rig(Mamba2Case(name, mamba2_model(name).geom, batch, 16, DTYPES[sd]))
                std = rig.time_cycle_us(Launch("standard"), args.replays)
                for fold in FOLD_CONFIGS:
                    cfg = None if fold is None else LaunchConfig(16, 2, 1, 1, fold[0], 0, 8, 0, fold[1])
                    for flat in (False, True):
                        replay_fold.FLAT_HEADS = flat
                        lc = Launch("output_only", None, cfg)
                        try:
                            cycle = rig.time_cycle_us(lc, args.replays)
                            flush, nonflush = rig.time_step_us(lc, 15, args.replays), rig.time_step_us(lc, 8, args.replays)
                        finally:
                            replay_fold.FLAT_HEADS = False
                        records.append(dict(gpu=torch.cuda.get_device_name(), model=name, state_dtype=sd, batch=batch,
                                            L=16, fold="table" if fold is None else f"{fold[0]} heads x {fold[1]} rows",
                                            flat_heads=flat, us_per_step=round(cycle, 2),
                                            standard_us_per_step=round(std, 2), speedup=round(std / cycle, 3),
                                            flush_us=round(flush, 1), nonflush_us=round(nonflush, 1),
                                            commit=git_commit()))
                        print(records[-1], flush=True)
                        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
                del rig
                torch.cuda.empty_cache()
    print(tabulate([{k: r[k] for k in ("model", "state_dtype", "batch", "fold", "flat_heads", "speedup", "flush_us",
                                       "nonflush_us")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
