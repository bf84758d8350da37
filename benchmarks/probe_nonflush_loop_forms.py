#!/usr/bin/env python3
"""The Mamba2 non-flush launch's loop over a run of row blocks in its three forms, on
whole cycles: plain (nothing in flight while a block's sums run), software-pipelined
(``loop_stages`` 2) and the next block's tiles loaded into registers one block ahead
(``prefetch``), each on the tiles the tuner takes for Nano-4B (32 rows over 3 blocks, 16
over 5), with the table's fold launch, side by side (``replayssm.md`` section 6): cycles in
phase and staggered, and the non-flush step apart.

    python benchmarks/probe_nonflush_loop_forms.py   # -> benchmarks/results/mamba2_nonflush_loop_forms.json
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from trtllm_replayssm._runtime import device_arch
from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, median_of_rounds
from trtllm_replayssm.ops.launch import LaunchConfig

TILES = {"32x3": LaunchConfig(32, 1, 0, loop_blocks=3), "16x5": LaunchConfig(16, 1, 0, loop_blocks=5)}
FORMS = {"plain": {}, "staged": {"loop_stages": 2}, "prefetch": {"prefetch": 1}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-nano-4b"], [32, 128, 512], "mamba2_nonflush_loop_forms.json")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, sd, batch, rig in case_rigs(args):
        fold = rig.table_configs(device_arch(rig.cache.write_pos.device))["fold"]["config"]
        L = rig.case.buffer_len
        launches = {(tile, form): Launch("output_only", replace(cfg, **extra), fold)
                    for tile, cfg in TILES.items() for form, extra in FORMS.items()}
        timers = {"standard": lambda: rig.time_cycle_us(Launch("standard"), args.replays)}
        for key, lc in launches.items():
            timers[key + ("aligned",)] = lambda lc=lc: rig.time_cycle_us(lc, args.replays)
            timers[key + ("staggered",)] = lambda lc=lc: rig.time_cycle_us(lc, args.replays, staggered=True)
            timers[key + ("nonflush",)] = lambda lc=lc: rig.time_step_us(lc, L // 2, args.replays)
        us = median_of_rounds(timers, args.rounds)
        for tile, form in launches:
            k = (tile, form)
            log.add(model=name, state_dtype=sd, batch=batch, L=L, tile=tile, form=form,
                    standard_us_per_step=round(us["standard"], 2), us_per_step=round(us[k + ("aligned",)], 2),
                    speedup=round(us["standard"] / us[k + ("aligned",)], 3),
                    staggered_us_per_step=round(us[k + ("staggered",)], 2),
                    staggered_speedup=round(us["standard"] / us[k + ("staggered",)], 3),
                    nonflush_us=round(us[k + ("nonflush",)], 1), rounds=args.rounds)
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
