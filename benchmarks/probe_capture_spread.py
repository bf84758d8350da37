#!/usr/bin/env python3
"""How much a cycle's time moves from one CUDA-graph capture to the next: the reason the
kernel benchmarks time their launches in rounds (``benchmarking.rig.time_phases_side_by_side``).

Per case, three rounds of: the output_only route on the table's configs passed
explicitly, the same route through the dispatcher (configs from the table), and the
standard kernel; each timing a fresh capture (``CycleRig.time_cycle_us``). Mamba2, fp32
state, L = 16, the package's tuned table.

    python benchmarks/probe_capture_spread.py     # -> benchmarks/results/capture_spread.json
"""

from __future__ import annotations

import argparse

import torch

from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops.launch import device_table_tag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["nemotron-3-nano-4b:512", "nemotron-3-super:512",
                                                   "nemotron-3-nano-4b:256"], help="model:batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/capture_spread.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    arch = device_table_tag(torch.device("cuda"))
    for spec in args.cases:
        name, batch = spec.split(":")
        rig = make_model_rig(name, int(batch), 16, torch.float32)
        case, table = rig.case, rig.table_configs(arch)
        launches = {"explicit": Launch("output_only", table["output_only"]["config"], table["fold"]["config"]),
                    "auto": Launch("output_only"), "standard": Launch("standard")}
        for rnd in range(args.rounds):
            for label, launch in launches.items():
                log.add(model=name, batch=case.batch, round=rnd, launch=label,
                        us=round(rig.time_cycle_us(launch, args.replays), 3))
        del rig
        torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
