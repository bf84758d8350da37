#!/usr/bin/env python3
"""GDN's prefetching non-flush launch, or its fold, with its first loads early, against ptxas's order.

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

``--launch fold`` does the same for the fold launch (``EARLY_FOLD_STATES``, on a fold config
of one block a program with the ring product a matmul: ``replay.early_fold_tiles``): its
checkpoint and ``d`` tiles go out with the ring's ``g`` / ``k`` tiles, right after the
cursor, where ptxas had them wait on the slot, the cursor, q, k, the ring and the gates one
after another. The step timed is then a flush step.

    python benchmarks/probe_gdn_early_tiles.py     # -> benchmarks/results/gdn_early_tiles.json
    python benchmarks/probe_gdn_early_tiles.py --launch fold --batches 1 2 4 8 32 --out ...
"""

from __future__ import annotations

import argparse
from typing import Dict

import torch

from trtllm_replayssm._runtime import device_arch
from trtllm_replayssm.benchmarking.probes import DTYPES, add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.gdn import replay as gdn_replay
from trtllm_replayssm.ops.launch import clamp_loop_blocks

FORMS = {"ptxas_order": (), "early": tuple(DTYPES.values())}  # the launch's early state dtypes, each form
# The module attribute that names a launch's early state dtypes, and its config in the table.
SWITCH = {"nonflush": "EARLY_TILES_STATES", "fold": "EARLY_FOLD_STATES"}
TABLE_KERNEL = {"nonflush": "output_only", "fold": "fold"}
LAUNCH = "nonflush"  # the launch the forms differ in (--launch)
CACHE_FIELDS = ("ssm_state", "d_cache", "k_cache", "g_cache")


def in_form(form: str, fn):
    """``fn`` run (and its graph captured) with :data:`LAUNCH` in ``form``."""
    def run():
        kept = getattr(gdn_replay, SWITCH[LAUNCH])
        setattr(gdn_replay, SWITCH[LAUNCH], FORMS[form])
        try:
            return fn()
        finally:
            setattr(gdn_replay, SWITCH[LAUNCH], kept)
    return run


def takes_early_form(config, head_v_dim: int) -> bool:
    """Whether the table's config of :data:`LAUNCH` can take the early form (else both forms
    run the same kernel)."""
    if LAUNCH == "nonflush":
        return bool(config.prefetch)
    return bool(config.fold_dot) and clamp_loop_blocks(config, head_v_dim).loop_blocks == 1


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
    of the route's cycles in phase and staggered and of a step of :data:`LAUNCH` (a
    non-flush or a flush step: by form and what), the timers taking turns over ``rounds``."""
    L, route = rig.case.buffer_len, Launch("output_only")
    baselines = {lc.kernel: lc for lc in (Launch("standard"), Launch("always_flush"), rig.baseline_launch())}
    timers: Dict = {k: (lambda lc=lc: rig.time_cycle_us(lc, replays)) for k, lc in baselines.items()}
    for form in FORMS:
        timers[(form, "aligned")] = in_form(form, lambda: rig.time_cycle_us(route, replays))
        timers[(form, "staggered")] = in_form(form, lambda: rig.time_cycle_us(route, replays, staggered=True))
        at = L // 2 if LAUNCH == "nonflush" else L - 1
        timers[(form, "step")] = in_form(form, lambda at=at: rig.time_step_us(route, at, replays))
    us = median_of_rounds(timers, rounds)
    us["baseline"] = fastest_baseline({k: us[k] for k in baselines})
    return us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["qwen3.5-4b", "qwen3.5-122b"], [8, 32, 128, 512], "gdn_early_tiles.json")
    ap.add_argument("--launch", choices=list(SWITCH), default="nonflush", help="the launch whose loads go early")
    args = ap.parse_args()
    global LAUNCH
    LAUNCH = args.launch
    log = ProbeLog(args.out)
    for name, sd, batch, rig in case_rigs(args):
        config = rig.table_configs(device_arch(rig.cache.write_pos.device))[TABLE_KERNEL[LAUNCH]]["config"]
        case = dict(model=name, state_dtype=sd, batch=batch, L=rig.case.buffer_len, launch=LAUNCH,
                    **{f"{LAUNCH}_config": str(config)})
        if not takes_early_form(config, rig.case.geom.head_v_dim):
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
                    **{f"{LAUNCH}_us": round(us[(form, "step")], 2)}, rounds=args.rounds)
    log.print_table()


if __name__ == "__main__":
    main()
