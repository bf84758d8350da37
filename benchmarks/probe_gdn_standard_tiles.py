#!/usr/bin/env python3
"""The GDN standard kernel's one-warp tiles with and without a ptxas register cap
(``LaunchConfig.maxnreg``), on the routes that run it: the standard step, and the replay
kernel's ``standard_step`` (cursor checked) and ``always_flush`` (cursor checked, ring
drained) at the small batches where the dispatcher takes them; fla-core beside them where
it is installed. Whole cycles, cold L2, CUDA graphs; the launches take turns over
``--rounds`` rounds and each reports its median (``benchmarking.rig.median_of_rounds``).

    python benchmarks/probe_gdn_standard_tiles.py --out benchmarks/results/gdn_standard_tiles.json
"""

from __future__ import annotations

import argparse
import itertools

import torch

from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, median_of_rounds
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops.launch import LaunchConfig

ROUTES = ("standard", "standard_step", "always_flush")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--state-dtypes", nargs="+", default=["bf16", "fp32"], choices=sorted(DTYPES))
    ap.add_argument("--rows", nargs="+", type=int, default=[4, 8, 16], help="state rows a one-warp program takes")
    ap.add_argument("--caps", nargs="+", type=int, default=[0, 128], help="maxnreg values (0: no cap)")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_standard_tiles.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch in itertools.product(args.models, args.state_dtypes, args.batches):
        rig = make_model_rig(name, batch, 16, DTYPES[dtype])
        launches = [Launch(route, LaunchConfig(rows, 1, maxnreg=cap))
                    for rows, cap, route in itertools.product(args.rows, args.caps, ROUTES)]
        if getattr(rig, "fla", None) is not None:
            launches.append(Launch("fla"))
        timers = {(lc.kernel, lc.config): (lambda lc=lc, rig=rig: rig.time_cycle_us(lc, args.replays))
                  for lc in launches}
        us = median_of_rounds(timers, args.rounds)
        for (route, cfg), t in us.items():
            log.add(model=name, state_dtype=dtype, batch=batch, L=16, route=route,
                    rows=cfg.block_p if cfg else None, maxnreg=cfg.maxnreg if cfg else None, us_per_step=round(t, 3))
        del rig
        torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
