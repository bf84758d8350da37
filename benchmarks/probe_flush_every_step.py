#!/usr/bin/env python3
"""The routes that flush every step (``standard_step``, ``always_flush``) against the
standard kernel, at the small batches where the dispatcher takes them.

Both routes run the standard kernel with the slot's cursor checked (a row whose ring is
not empty is refused, or drained first); in steady state they should cost what the
standard kernel costs. Whole cycles, cold L2, CUDA graphs, median (the benchmarks'
method), each kernel on its tuned table's config; both families, fp32 and bf16 state.
``--label`` names the code measured (run it once per version to compare them).

    python benchmarks/probe_flush_every_step.py --label after --out benchmarks/results/flush_every_step.json
"""

from __future__ import annotations

import argparse

import torch

from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.benchmarking.rigs import make_model_rig

ROUTES = ("standard", "standard_step", "always_flush")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+",
                    default=["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-122b", "qwen3.5-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--label", default="", help="what code this run measures (e.g. before / after)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/flush_every_step.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name in args.models:
        for dtype in args.state_dtypes:
            for batch in args.batches:
                rig = make_model_rig(name, batch, 16, DTYPES[dtype])
                us = {route: rig.time_cycle_us(Launch(route), args.replays) for route in ROUTES}
                log.add(label=args.label, model=name, state_dtype=dtype, batch=batch, L=16,
                        **{f"{route}_us": round(t, 3) for route, t in us.items()},
                        **{f"{route}_vs_standard": round(us["standard"] / us[route], 3) for route in ROUTES[1:]})
                del rig
                torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
