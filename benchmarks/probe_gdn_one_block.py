#!/usr/bin/env python3
"""GDN's non-flush launch with one block of value rows a program, against the table's loop.

At batch 8 the table's fp32 non-flush configs loop over 4 (Qwen3.5-4B) or 8 (-122B) blocks
of 8 rows with the next block prefetched, so a program keeps two blocks in flight and its
chain of loads runs through that many round trips to memory. A prefetching config of one
block a program issues its whole tile, with the ring's g / k tiles, before the head's work
(``EARLY_TILES``, fp32 states): a program's rows all in flight at once. This times
such configs (``block_p,num_warps``: one block a program, ``prefetch``) beside the table's
``output_only`` route and the baselines, all taking turns over rounds (``replayssm.md``
section 6): cycles in phase and staggered, then a non-flush step (cursors at L / 2) of each
replay launch.

    python benchmarks/probe_gdn_one_block.py      # -> benchmarks/results/gdn_one_block.json
"""

from __future__ import annotations

import argparse

from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, time_phases_side_by_side
from trtllm_replayssm.ops.launch import LaunchConfig

def one_block_config(spec: str) -> LaunchConfig:
    """``"32,1"`` -> 32 rows on 1 warp, one block a program, prefetching."""
    block_p, num_warps = map(int, spec.split(","))
    return LaunchConfig(block_p, num_warps, prefetch=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["qwen3.5-122b", "qwen3.5-4b"], [8], "gdn_one_block.json")
    ap.add_argument("--configs", nargs="+", default=["32,1", "32,4", "64,4", "16,1"], metavar="BLOCK_P,WARPS")
    ap.set_defaults(state_dtypes=["fp32"], rounds=2)
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, sd, batch, rig in case_rigs(args):
        launches = {"standard": Launch("standard"), "table": Launch("output_only")}
        launches.update({spec: Launch("output_only", one_block_config(spec)) for spec in args.configs})
        if rig.fla is not None:
            launches["fla"] = Launch("fla")
        us = time_phases_side_by_side(rig, launches, args.replays, args.rounds)
        for label, launch in launches.items():
            nonflush = (round(rig.time_step_us(launch, rig.case.buffer_len // 2, args.replays), 3)
                        if rig.keeps_ring(launch) else None)
            log.add(model=name, state_dtype=sd, batch=batch, L=rig.case.buffer_len, launch=label,
                    config=str(launch.config or "table"), us_per_step=round(us["aligned"][label], 3),
                    staggered_us_per_step=round(us["staggered"][label], 3), nonflush_us=nonflush,
                    rounds=args.rounds)
        del rig
    log.print_table()


if __name__ == "__main__":
    main()
