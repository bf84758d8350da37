#!/usr/bin/env python3
"""The fold launch's product into a bf16 checkpoint in one TF32 pass against the
fp32-accurate product (``ops.common.one_pass_fold``), on whole cycles.

A bf16 checkpoint's store rounds by up to 2^-9 relative; one TF32 pass adds ~2^-11 a
product term. Mamba2's fp32-accurate fold takes two passes (``split_tf32_dot``), GDN's
three (tf32x3). This times the output_only route on the tuned table's configs with the
fold launches (both families) given each form's constexprs by a launcher in front of the
package's (``fp32_accurate``, ``one_pass``), both phases and the flush step, taking turns
over ``--rounds`` captures, against the fastest every-step baseline measured (the
standard kernel, the family's other baseline, ``always_flush``).

A form's product changes the fold's registers (GDN bf16, one-head tiles: 125-128 -> 88-96),
so the best fold config may change with it: ``--tune-fold`` gives each form the fold config
the family's tuner picks under it (both phases, the table's non-flush launch) before the
side-by-side timing, instead of the table's.

    python benchmarks/probe_one_pass_fold.py     # -> benchmarks/results/one_pass_fold.json
    python benchmarks/probe_one_pass_fold.py --models qwen3.5-4b qwen3.5-122b --tune-fold --out ...
"""

from __future__ import annotations

import argparse

from trtllm_replayssm.benchmarking.gdn_ar import GDNRig, tune_gdn_case
from trtllm_replayssm.benchmarking.mamba2_ar import tune_case
from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs, is_fold_launch
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import CycleRig, Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.common import exact_in_tf32
from trtllm_replayssm.ops.launch import LaunchConfig, launcher_in_front
from trtllm_replayssm.ops.mamba2 import replay_fold

FORMS = ("fp32_accurate", "one_pass")


def fold_product(form: str):
    """A launcher that runs the fold launches (both families) with ``form``'s product;
    other launches pass on."""
    one_pass = form == "one_pass"

    def launch(kernel, grid, kwargs) -> bool:
        if not is_fold_launch(kernel, kwargs):
            return False
        # Mamba2's fold takes the split pass over its exact B ring; GDN's takes no EXACT_B (tf32x3)
        exact_b = kernel is replay_fold._replay_fold_kernel and exact_in_tf32(kwargs["B_cache_ptr"].dtype)
        product = replay_fold.product_constexprs(one_pass, exact_b)
        kernel[grid](**{**kwargs, **{k: v for k, v in product.items() if k in kwargs}})
        return True
    return launch


def tuned_fold(rig: CycleRig, form: str, limit=None) -> LaunchConfig:
    """The fold config the rig's family tuner picks with ``form``'s product (the slower
    phase fastest, the table's non-flush launch; ``limit``: its first candidates)."""
    tune = tune_gdn_case if isinstance(rig, GDNRig) else tune_case
    with launcher_in_front(fold_product(form)):
        return tune(rig, limit=limit, kernels=["fold"])["fold"]["config"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-4b", "qwen3.5-122b"], [128, 512],
                  "one_pass_fold.json")
    ap.set_defaults(state_dtypes=["bf16"])
    ap.add_argument("--tune-fold", action="store_true", help="each form on the fold config tuned under it")
    ap.add_argument("--max-candidates", type=int, default=None, help="with --tune-fold: the fold's first N configs")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch, rig in case_rigs(args):
        L = rig.case.buffer_len
        routes = {fold: Launch("output_only", fold_config=tuned_fold(rig, fold, args.max_candidates)
                               if args.tune_fold else None) for fold in FORMS}
        baselines = {lc.kernel: lc for lc in (Launch("standard"), Launch("always_flush"), rig.baseline_launch())}
        timers = {k: (lambda lc=lc: rig.time_cycle_us(lc, args.replays)) for k, lc in baselines.items()}
        for fold, route in routes.items():
            def within(fn, front=fold_product(fold)):
                def timed():
                    with launcher_in_front(front):
                        return fn()
                return timed
            timers[(fold, "aligned")] = within(lambda lc=route: rig.time_cycle_us(lc, args.replays))
            timers[(fold, "staggered")] = within(lambda lc=route: rig.time_cycle_us(lc, args.replays, staggered=True))
            timers[(fold, "flush")] = within(lambda lc=route: rig.time_step_us(lc, L - 1, args.replays))
        us = median_of_rounds(timers, args.rounds)
        baseline = fastest_baseline({k: us[k] for k in baselines})
        base_us = us[baseline]
        for fold, route in routes.items():
            log.add(model=name, state_dtype=dtype, batch=batch, L=L, fold=fold, baseline=baseline,
                    baseline_us_per_step=round(base_us, 2), us_per_step=round(us[(fold, "aligned")], 2),
                    speedup=round(base_us / us[(fold, "aligned")], 3),
                    staggered_us_per_step=round(us[(fold, "staggered")], 2),
                    staggered_speedup=round(base_us / us[(fold, "staggered")], 3),
                    flush_us=round(us[(fold, "flush")], 1), rounds=args.rounds,
                    fold_config=route.fold_config.to_dict() if route.fold_config else "table")
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
