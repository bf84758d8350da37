#!/usr/bin/env python3
"""The standard kernels' tiles with and without a ptxas register cap
(``LaunchConfig.maxnreg``), on the routes that run them: the standard step, and the
replay kernel's ``standard_step`` (cursor checked) and ``always_flush`` (cursor checked,
ring drained); fla-core beside them where it is installed (GDN). Tiles: ``--rows`` on
one warp, or with ``--table-tiles`` the tuned table's configs of each route (Mamba2's
with their early-terms form). ``--without-slot-indices`` also times the standard step
with no slot indices (rows read in batch order, as the benchmarks call fla-core: one
dependent load fewer a program). Whole cycles, cold L2, CUDA graphs; the launches take
turns over ``--rounds`` rounds and each reports its median
(``benchmarking.rig.median_of_rounds``).

    python benchmarks/probe_standard_tiles.py --out benchmarks/results/standard_tiles.json
    python benchmarks/probe_standard_tiles.py --models nemotron-3-nano-4b nemotron-3-super --table-tiles \\
        --batches 8 128 512 --out benchmarks/results/standard_tiles_mamba2.json
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, median_of_rounds
from trtllm_replayssm.ops.launch import LaunchConfig, device_table_tag

# route -> the table's kernel whose config it launches
ROUTES = {"standard": "standard", "standard_step": "always_flush", "always_flush": "always_flush"}


def tiles(rig, route: str, args) -> list:
    if not args.table_tiles:
        return [LaunchConfig(rows, 1) for rows in args.rows]
    return [rig.table_configs(device_table_tag(torch.device("cuda")))[ROUTES[route]]["config"]]


def time_without_slot_indices(rig, launch: Launch, replays: int) -> float:
    """A cycle of ``launch`` with the rig's step taking no slot indices."""
    key = "initial_state_indices" if "initial_state_indices" in rig.step else "state_batch_indices"
    kept, rig.step[key] = rig.step[key], None
    try:
        return rig.time_cycle_us(launch, replays)
    finally:
        rig.step[key] = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["qwen3.5-4b", "qwen3.5-122b"], [1, 8, 32], "standard_tiles.json")
    ap.add_argument("--rows", nargs="+", type=int, default=[4, 8, 16], help="state rows a one-warp program takes")
    ap.add_argument("--table-tiles", action="store_true", help="the tuned table's configs instead of --rows")
    ap.add_argument("--caps", nargs="+", type=int, default=[0, 128],
                    help="maxnreg values (0: no cap; -1: the tile's own, as the table holds it)")
    ap.add_argument("--without-slot-indices", action="store_true",
                    help="also time the standard step without slot indices")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch, rig in case_rigs(args):
        launches = [Launch(route, tile if cap < 0 else replace(tile, maxnreg=cap))
                    for route in ROUTES for tile in tiles(rig, route, args) for cap in args.caps]
        if getattr(rig, "fla", None) is not None:
            launches.append(Launch("fla"))
        timers = {(lc.kernel, lc.config, True): (lambda lc=lc, rig=rig: rig.time_cycle_us(lc, args.replays))
                  for lc in launches}
        if args.without_slot_indices:
            timers.update({(lc.kernel, lc.config, False):
                           (lambda lc=lc, rig=rig: time_without_slot_indices(rig, lc, args.replays))
                           for lc in launches if lc.kernel == "standard"})
        us = median_of_rounds(timers, args.rounds)
        for (route, cfg, slot_indices), t in us.items():
            log.add(model=name, state_dtype=dtype, batch=batch, L=16, route=route, slot_indices=slot_indices,
                    rows=cfg.block_p if cfg else None, maxnreg=cfg.maxnreg if cfg else None,
                    config=cfg.to_dict() if cfg and args.table_tiles else None, us_per_step=round(t, 3))
        del launches, timers, rig
    log.print_table()


if __name__ == "__main__":
    main()
