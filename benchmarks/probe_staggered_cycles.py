#!/usr/bin/env python3
"""Cycles with the rows in phase against cycles with staggered cursors.

The benchmarks time cycles in which every cursor starts at 0, so every row flushes at the
cycle's last step (``replayssm.md`` section 6). A server's requests enter decode at
different steps: their cursors are spread over the L phases and 1/L of the rows flush at
every step (``CycleRig.start_cursors``). The work of a cycle is the same; how the fold
launch spreads it is not (its programs look through blocks of rows, and a program with a
flushing row folds it over several heads one after another). This probe times the
dispatcher table's ``output_only`` launches both ways beside the baseline (the standard
kernels, whose cycles have no phase), and with ``--fold-sweep`` every fold candidate both
ways, at the table's non-flush config.

    python benchmarks/probe_staggered_cycles.py --out benchmarks/results/staggered_cycles.json
"""

from __future__ import annotations

import argparse
import itertools

import torch

from trtllm_replayssm.benchmarking import gdn_ar, mamba2_ar
from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import PHASES, Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.launch import device_table_tag


def fold_candidates(rig) -> list:
    if isinstance(rig, gdn_ar.GDNRig):
        return gdn_ar.candidate_configs("fold", rig.case.geom.head_v_dim)
    return mamba2_ar.candidate_configs("fold", rig.case.geom.headdim)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-nano-4b", "nemotron-3-super", "qwen3.5-4b", "qwen3.5-122b"], [8, 32, 128, 512],
                  "staggered_cycles.json")
    ap.add_argument("--fold-sweep", action="store_true", help="also every fold candidate, both ways")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    arch = device_table_tag(torch.device("cuda"))
    for name, dtype, batch, rig in case_rigs(args):
        table = rig.table_configs(arch)
        nonflush, fold = table["output_only"]["config"], table["fold"]["config"]
        launches = {"standard": Launch("standard", table["standard"]["config"]),
                    "always_flush": Launch("always_flush", table["always_flush"]["config"])}
        if getattr(rig, "fla", None) is not None:
            launches["fla"] = Launch("fla")
        folds = fold_candidates(rig) if args.fold_sweep else [fold]
        timers = {(k, None, "aligned"): (lambda lc=lc, rig=rig: rig.time_cycle_us(lc, args.replays))
                  for k, lc in launches.items()}
        for cfg, phase in itertools.product(folds, PHASES):
            lc = Launch("output_only", nonflush, cfg)
            timers[("output_only", cfg, phase)] = (lambda lc=lc, s=phase == "staggered", rig=rig:
                                                 rig.time_cycle_us(lc, args.replays, s))
        us = median_of_rounds(timers, args.rounds)
        base = fastest_baseline({k: t for (k, _, _), t in us.items() if k != "output_only"})
        base_us = us[(base, None, "aligned")]
        for (route, cfg, phase), t in us.items():
            log.add(model=name, state_dtype=dtype, batch=batch, L=16, route=route, phases=phase,
                    table_fold=cfg == fold if cfg else None, fold=cfg.to_dict() if cfg else None,
                    us_per_step=round(t, 3), baseline=base, speedup=round(base_us / t, 3))
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
