#!/usr/bin/env python3
"""The Mamba2 output_only route with its flush rows folded in the step launch (``fold_dot
= 1`` on the step's config: no fold launch) against the two launches of the tuned table.

The fold launch of the two-launch form runs on every step; on the 15 steps of a cycle
where no row flushes its programs return at once, so the tuner picks few, long fold
programs, which are slow on the step where every row flushes. Folded in the step launch,
a flush row's fold is spread over the step's own grid, and nothing runs for it on the
other steps; the price is the fold's registers in the step kernel. Same method as
``bench_mamba2_ar.py`` (whole cycles, cold L2, CUDA graphs, median); the flush and a
non-flush step are timed apart too.

    python benchmarks/probe_fused_fold.py      # -> benchmarks/results/mamba2_fused_fold.json
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

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# (block_p, num_warps, fold_chunk) of the step launch, which folds its flush rows too.
FUSED = [(16, 1, 0), (16, 1, 4), (16, 2, 0), (32, 2, 0), (32, 2, 4), (32, 4, 4), (32, 4, 0), (64, 4, 4),
         (64, 2, 4), (32, 1, 4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-nano-4b", "nemotron-3-super"])
    ap.add_argument("--cases", nargs="+", default=["fp32:8", "fp32:32", "fp32:128", "fp32:512", "bf16:128",
                                                   "bf16:512"], help="state_dtype:batch")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_fused_fold.json"))
    args = ap.parse_args()
    records, commit, gpu = [], git_commit(), torch.cuda.get_device_name()
    for name in args.models:
        for spec in args.cases:
            sd, batch = spec.split(":")
            rig = make_rig(Mamba2Case(name, mamba2_model(name).geom, int(batch), 16, DTYPES[sd]))
            std = rig.time_cycle_us(Launch("standard"), args.replays)
            variants = [("two launches (tuned)", Launch("output_only"))] + [
                (f"fused {c}", Launch("output_only", LaunchConfig(*c, fold_dot=1))) for c in FUSED]
            for label, lc in variants:
                try:
                    us = rig.time_cycle_us(lc, args.replays)
                    flush, nonflush = rig.time_step_us(lc, 15, args.replays), rig.time_step_us(lc, 8, args.replays)
                except Exception as e:  # a config the compiler rejects (resources)
                    print(name, spec, label, type(e).__name__, e, flush=True)
                    continue
                records.append(dict(gpu=gpu, model=name, state_dtype=sd, batch=int(batch), L=16, variant=label,
                                    config=lc.config.to_dict() if lc.config else None, us_per_step=round(us, 2),
                                    standard_us_per_step=round(std, 2), speedup=round(std / us, 3),
                                    flush_us=round(flush, 1), nonflush_us=round(nonflush, 1), commit=commit))
                print({k: v for k, v in records[-1].items() if k not in ("gpu", "config", "commit")}, flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
            del rig
            torch.cuda.empty_cache()
    print(tabulate([{k: v for k, v in r.items() if k not in ("gpu", "config", "commit")} for r in records],
                   headers="keys"))


if __name__ == "__main__":
    main()
