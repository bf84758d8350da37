#!/usr/bin/env python3
"""What a step would cost if each row's heads flushed in 16 phases (a design probe).

Today every head of a row flushes at the row's step ``write_pos == L - 1``. With the rows
in phase that step folds every state of the batch; with staggered cursors 1/L of the rows
fold at each step, rows that only the cursors can name. Either way the fold launch runs
on every step and its grid is sized for the worst case (``README``: the flush step is
1.6-1.9x a standard step). If instead head ``h`` of every row flushed at phase ``h mod
L``, each step would fold exactly ``H / L`` heads of every row: the fold launch's grid
would be dense (every program has a state to fold) and the non-flush launch would serve
the other heads, whatever the cursors.

No kernel for that exists; this probe bounds its step from the package's kernels:
- the non-flush part: the full case's cycle with staggered cursors and the fold launch
  skipped (15 in 16 of the (row, head) states read, windows spread over 0..L-2; the
  flushing rows' programs still exit, so a slight over-estimate);
- the fold part: a case of ``H / L`` heads (one a group or key head, as the phases would
  pick them) with every row flushing, its non-flush launch skipped, on the fastest of the
  fold, ``always_flush`` (and, Mamba2, ``state_and_output``) candidates.
The sum is set beside the fastest baseline and the package's cycles (table configs), in
phase and staggered. Launch overlap between the two parts is not counted.

    python benchmarks/probe_phased_heads.py      # -> benchmarks/results/phased_heads.json
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from trtllm_replayssm.benchmarking import gdn_ar, mamba2_ar
from trtllm_replayssm.benchmarking.probes import (SkipLaunches, add_case_args, case_rigs, is_fold_launch,
                                                  is_nonflush_launch)
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.launch import device_table_tag, launcher_in_front


def fold_share_rig(rig, L: int):
    """A rig of the same family and batch with the ``H / L`` heads a phase folds, or None
    where the heads do not split into L phases. Heads ``k, k + L, ...`` fall in distinct
    groups (key heads) in every geometry here, so the rig has a group a head."""
    case, gdn = rig.case, isinstance(rig, gdn_ar.GDNRig)
    total = case.geom.num_v_heads if gdn else case.geom.nheads
    if total % L:
        return None
    heads = total // L
    if gdn:
        geom = dataclasses.replace(case.geom, num_v_heads=heads, num_k_heads=heads)
        return gdn_ar.make_gdn_rig(dataclasses.replace(case, geom=geom))
    geom = dataclasses.replace(case.geom, nheads=heads, ngroups=heads)
    return mamba2_ar.make_rig(dataclasses.replace(case, geom=geom))


def fold_candidates(rig, nonflush_cfg) -> list:
    """Launches that fold every row of ``rig`` (cursors at L - 1)."""
    if isinstance(rig, gdn_ar.GDNRig):
        cand, V = gdn_ar.candidate_configs, rig.case.geom.head_v_dim
        launches = [Launch("output_only", nonflush_cfg, c) for c in cand("fold", V)]
        return launches + [Launch("always_flush", c) for c in cand("always_flush", V)]
    cand, P = mamba2_ar.candidate_configs, rig.case.geom.headdim
    launches = [Launch("output_only", nonflush_cfg, c) for c in cand("fold", P)]
    return (launches + [Launch("always_flush", c) for c in cand("always_flush", P)]
            + [Launch("state_and_output", c) for c in cand("state_and_output", P)])


def flush_step_us(rig, launch: Launch, replays: int) -> float:
    """A step with every row flushing; inf for a config the compiler rejects (resources)."""
    try:
        return rig.time_step_us(launch, rig.case.buffer_len - 1, replays)
    except Exception as e:
        print(f"skipped {launch}: {type(e).__name__}")
        return float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-nano-4b", "nemotron-3-super", "qwen3.5-4b", "qwen3.5-122b"], [32, 128, 512],
                  "phased_heads.json")
    ap.add_argument("--sweep-replays", type=int, default=10, help="replays a fold candidate is timed over")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    arch = device_table_tag(torch.device("cuda"))
    L = 16
    for name, dtype, batch, rig in case_rigs(args, L):
        share = fold_share_rig(rig, L)
        if share is None:
            print(f"{name}: heads do not split into {L} phases; skipped")
            continue
        table = rig.table_configs(arch)
        nonflush = table["output_only"]["config"]
        launches = {"standard": Launch("standard", table["standard"]["config"]),
                    "always_flush": Launch("always_flush", table["always_flush"]["config"])}
        if getattr(rig, "fla", None) is not None:
            launches["fla"] = Launch("fla")
        package = Launch("output_only", nonflush, table["fold"]["config"])

        def skipped(matches, fn):
            def run():
                with launcher_in_front(SkipLaunches(matches)):
                    return fn()
            return run

        with launcher_in_front(SkipLaunches(is_nonflush_launch)):
            best_fold = min(fold_candidates(share, nonflush), key=lambda lc: flush_step_us(share, lc, args.sweep_replays))
        timers = {k: (lambda lc=lc: rig.time_cycle_us(lc, args.replays)) for k, lc in launches.items()}
        timers["package_aligned"] = lambda: rig.time_cycle_us(package, args.replays)
        timers["package_staggered"] = lambda: rig.time_cycle_us(package, args.replays, staggered=True)
        timers["nonflush_part"] = skipped(is_fold_launch, lambda: rig.time_cycle_us(package, args.replays, staggered=True))
        timers["fold_part"] = skipped(is_nonflush_launch, lambda: share.time_step_us(best_fold, L - 1, args.replays))
        us = median_of_rounds(timers, args.rounds)
        base = fastest_baseline({k: us[k] for k in launches})
        phased = us["nonflush_part"] + us["fold_part"]
        log.add(model=name, state_dtype=dtype, batch=batch, L=L, baseline=base,
                baseline_us_per_step=round(us[base], 2),
                package_aligned_us=round(us["package_aligned"], 2),
                package_staggered_us=round(us["package_staggered"], 2),
                nonflush_part_us=round(us["nonflush_part"], 2), fold_part_us=round(us["fold_part"], 2),
                fold_launch=best_fold.kernel, fold_config=best_fold.fold_config.to_dict() if best_fold.kernel == "output_only"
                else best_fold.config.to_dict(),
                phased_us=round(phased, 2),
                speedup_package_aligned=round(us[base] / us["package_aligned"], 3),
                speedup_package_staggered=round(us[base] / us["package_staggered"], 3),
                speedup_phased=round(us[base] / phased, 3))
        del rig, share, timers
    log.print_table()


if __name__ == "__main__":
    main()
