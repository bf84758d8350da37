#!/usr/bin/env python3
"""The Mamba2 fold's next checkpoint tile in registers instead of staged, on whole cycles.

The fold launch reads a block of the checkpoint and writes it back, inside a loop over a
head's blocks of rows that Triton software-pipelines (``LOOP_STAGES`` 3): the next
block's state comes through shared memory, in an unswizzled layout that the fold reads
back in the MMA accumulator's layout (a warp's eight rows of a 512-byte row pitch on the
same banks). With ``replay_fold.PREFETCH_STATE`` the next block's tile is loaded into
registers one block ahead instead, and only the ring's tiles are staged. This times the
output_only route on the table's configs both ways, side by side (rounds take turns): the
cycle in phase and staggered, the flush and the non-flush step.

    python benchmarks/probe_fold_prefetch.py        # -> benchmarks/results/fold_prefetch.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch, median_of_rounds
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops.mamba2 import replay_fold

VARIANTS = {"staged": dict(prefetch=False), "prefetch": dict(prefetch=True)}


def timed(variant: dict, timer):
    def run():
        replay_fold.PREFETCH_STATE = variant["prefetch"]
        try:
            return timer()
        finally:
            replay_fold.PREFETCH_STATE = False
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[32, 128, 512])
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/fold_prefetch.json"))
    args = ap.parse_args()
    records = []
    for name in args.models:
        for sd_name in args.state_dtypes:
            sd = {"fp32": torch.float32, "bf16": torch.bfloat16}[sd_name]
            for batch in args.batches:
                rig = make_model_rig(name, batch, 16, sd)
                L = rig.case.buffer_len
                lc = Launch("output_only")
                timers = {"standard": lambda: rig.time_cycle_us(Launch("standard"))}
                for v in args.variants:
                    var = VARIANTS[v]
                    timers[f"{v}|cycle"] = timed(var, lambda: rig.time_cycle_us(lc))
                    timers[f"{v}|staggered"] = timed(var, lambda: rig.time_cycle_us(lc, staggered=True))
                    timers[f"{v}|flush"] = timed(var, lambda: rig.time_step_us(lc, L - 1))
                    timers[f"{v}|nonflush"] = timed(var, lambda: rig.time_step_us(lc, L // 2))
                us = median_of_rounds(timers, args.rounds)
                for v in args.variants:
                    records.append(dict(
                        gpu=torch.cuda.get_device_name(), model=name, state_dtype=sd_name, batch=batch, L=L,
                        variant=v, us_per_step=round(us[f"{v}|cycle"], 2),
                        staggered_us_per_step=round(us[f"{v}|staggered"], 2),
                        standard_us_per_step=round(us["standard"], 2),
                        speedup=round(us["standard"] / us[f"{v}|cycle"], 3),
                        staggered_speedup=round(us["standard"] / us[f"{v}|staggered"], 3),
                        flush_us=round(us[f"{v}|flush"], 1), nonflush_us=round(us[f"{v}|nonflush"], 1),
                        commit=git_commit()))
                    print(records[-1], flush=True)
                Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
                rig = None  # free its pools before the next case
                torch.cuda.empty_cache()
    print(tabulate([{k: r[k] for k in ("model", "state_dtype", "batch", "variant", "speedup", "staggered_speedup",
                                       "flush_us", "nonflush_us")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
