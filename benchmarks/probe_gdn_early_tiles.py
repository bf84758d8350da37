#!/usr/bin/env python3
"""GDN's prefetching non-flush launch with its first loads early, against ptxas's order.

On a non-flush config with ``prefetch`` the launch can issue its first block's checkpoint
and ``d`` tiles and the ring's ``g`` / ``k`` tiles before the head's q / k / gate loads,
behind a barrier (``ops/gdn/replay.py``: ``EARLY_TILES``, on for the state dtypes in
``EARLY_TILES_STATES``). Left to ptxas, the first state bytes wait on the ``g`` tile's
reductions and the ``[L, K]`` k tile comes in a few loads at a time: a chain of round trips
that a launch of under a wave (batch 8: 1024 one-warp programs) pays in full (Nsight
Compute: ``ncu_small_batch.py``). This times the ``output_only`` route on the table's
configs with the early loads on and off, beside the baselines, all taking turns over
rounds (``replayssm.md`` section 6): cycles in phase and staggered, and a non-flush step.
Before timing, both forms run two staggered cycles from the same caches, whose
checkpoints, rings and outputs must be bit-identical (the same arithmetic, another
order of loads). A case whose table config does not prefetch runs the same kernel either
way and is recorded without timings.

    python benchmarks/probe_gdn_early_tiles.py     # -> benchmarks/results/gdn_early_tiles.json
"""

from __future__ import annotations

import argparse
from typing import Dict

import torch

from trtllm_replayssm.benchmarking.probes import DTYPES, add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.gdn import replay as gdn_replay
from trtllm_replayssm.ops.launch import device_table_tag

FORMS = {"ptxas_order": (), "early": tuple(DTYPES.values())}  # EARLY_TILES_STATES for each form
CACHE_FIELDS = ("ssm_state", "d_cache", "k_cache", "g_cache")


def in_form(form: str, fn):
    """``fn`` run (and its graph captured) with the non-flush launch in ``form``."""
    def run():
        kept = gdn_replay.EARLY_TILES_STATES
        gdn_replay.EARLY_TILES_STATES = FORMS[form]
        try:
            return fn()
        finally:
            gdn_replay.EARLY_TILES_STATES = kept
    return run


def forms_agree(rig, cycles: int = 2) -> bool:
    """Whether every form leaves the same caches and last outputs, bit for bit, after
    ``cycles`` staggered cycles from the rig's caches (which are put back after)."""
    start = {f: getattr(rig.cache, f).clone() for f in CACHE_FIELDS}
    route, ends = Launch("output_only"), []
    for form in FORMS:
        for f in CACHE_FIELDS:
            getattr(rig.cache, f).copy_(start[f])
        rig.start_cursors(route, staggered=True)
        for _ in range(cycles):
            in_form(form, rig.cycle_fn(route))()
        ends.append([getattr(rig.cache, f).clone() for f in CACHE_FIELDS] + [rig.step["out"].clone()])
    for f in CACHE_FIELDS:
        getattr(rig.cache, f).copy_(start[f])
    rig.cache.write_pos.zero_()
    return all(torch.equal(a, b) for end in ends[1:] for a, b in zip(ends[0], end))


def time_forms(rig, replays: int, rounds: int) -> Dict:
    """Microseconds a layer-step of the baselines' cycles (by kernel) and, for each form,
    of the route's cycles in phase and staggered and of a non-flush step (by form and
    what), the timers taking turns over ``rounds``."""
    L, route = rig.case.buffer_len, Launch("output_only")
    baselines = {lc.kernel: lc for lc in (Launch("standard"), Launch("always_flush"), rig.baseline_launch())}
    timers: Dict = {k: (lambda lc=lc: rig.time_cycle_us(lc, replays)) for k, lc in baselines.items()}
    for form in FORMS:
        timers[(form, "aligned")] = in_form(form, lambda: rig.time_cycle_us(route, replays))
        timers[(form, "staggered")] = in_form(form, lambda: rig.time_cycle_us(route, replays, staggered=True))
        timers[(form, "nonflush")] = in_form(form, lambda: rig.time_step_us(route, L // 2, replays))
    us = median_of_rounds(timers, rounds)
    us["baseline"] = fastest_baseline({k: us[k] for k in baselines})
    return us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["qwen3.5-4b", "qwen3.5-122b"], [8, 32, 128, 512], "gdn_early_tiles.json")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, sd, batch, rig in case_rigs(args):
        config = rig.table_configs(device_table_tag(rig.cache.write_pos.device))["output_only"]["config"]
        case = dict(model=name, state_dtype=sd, batch=batch, L=rig.case.buffer_len, nonflush_config=str(config))
        if not config.prefetch:
            log.add(**case, timed=False)
            del rig
            continue
        identical = forms_agree(rig)
        us = time_forms(rig, args.replays, args.rounds)
        del rig
        base_us = us[us["baseline"]]
        for form in FORMS:
            log.add(**case, timed=True, form=form, bit_identical=identical, baseline=us["baseline"],
                    baseline_us_per_step=round(base_us, 2), us_per_step=round(us[(form, "aligned")], 2),
                    speedup=round(base_us / us[(form, "aligned")], 3),
                    staggered_us_per_step=round(us[(form, "staggered")], 2),
                    staggered_speedup=round(base_us / us[(form, "staggered")], 3),
                    nonflush_us=round(us[(form, "nonflush")], 2), rounds=args.rounds)
    log.print_table()


if __name__ == "__main__":
    main()
