#!/usr/bin/env python3
"""Software pipelining of the replay kernels' loops over blocks of rows, on whole cycles.

The Mamba2 fold launch and GDN's non-flush and fold launches run a head's blocks of rows
one after another in a program (``loop_blocks``). Triton stages only the loads that feed
a matmul by default; ``tl.range(num_stages=k)`` stages every load of the loop, so the
next block's state is in flight while this one is used. This times the output_only
route (the tuned table's configs) with each module's ``LOOP_STAGES`` set to each value,
the flush and the non-flush step apart (same method as ``bench_mamba2_ar.py``).

    python benchmarks/probe_loop_stages.py            # -> benchmarks/results/loop_stages.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.models import GDNGeometry, model
from trtllm_replayssm.ops.gdn import replay as gdn_replay
from trtllm_replayssm.ops.mamba2 import replay_fold as m2_fold

STAGES = [None, 2, 3]


def set_stages(family: str, launch: str, stages) -> None:
    """``launch``: "fold" or "nonflush" (GDN only) gets ``stages``; the other launches None."""
    m2_fold.LOOP_STAGES = stages if (family, launch) == ("mamba2", "fold") else None
    for mode, name in ((gdn_replay.NONFLUSH.value, "nonflush"), (gdn_replay.FOLD.value, "fold")):
        gdn_replay.LOOP_STAGES[mode] = stages if (family, launch) == ("gdn", name) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--state-dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--stages", nargs="+", default=[str(s) for s in STAGES], help="stage counts (None: Triton's default)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/loop_stages.json"))
    args = ap.parse_args()
    stage_list = [None if s == "None" else int(s) for s in args.stages]
    sd = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.state_dtype]
    records = []
    for name in args.models:
        geom = model(name).geom
        family = "gdn" if isinstance(geom, GDNGeometry) else "mamba2"
        for batch in args.batches:
            rig = make_model_rig(name, batch, 16, sd)
            std = rig.time_cycle_us(Launch("standard"))
            for launch in (["fold", "nonflush"] if family == "gdn" else ["fold"]):
                for stages in stage_list:
                    set_stages(family, launch, stages)
                    lc = Launch("output_only")
                    try:
                        us, flush, nonflush = time_cycle_and_steps(rig, lc)
                    except Exception as e:  # a stage count the compiler rejects (shared memory)
                        print(name, batch, launch, stages, type(e).__name__, flush=True)
                        continue
                    finally:
                        set_stages(family, launch, None)
                    records.append(dict(gpu=torch.cuda.get_device_name(), model=name, state_dtype=args.state_dtype,
                                        batch=batch, L=16, launch=launch, loop_stages=stages,
                                        us_per_step=round(us, 2), standard_us_per_step=round(std, 2),
                                        speedup=round(std / us, 3), flush_us=round(flush, 1),
                                        nonflush_us=round(nonflush, 1), commit=git_commit()))
                    print(records[-1], flush=True)
                    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
            del rig
            torch.cuda.empty_cache()
    print(tabulate(records, headers="keys"))


if __name__ == "__main__":
    main()
