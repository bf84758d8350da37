#!/usr/bin/env python3
"""The fold launch's product into a bf16 checkpoint in one TF32 pass against the
fp32-accurate product (``ops.mamba2.replay_fold.one_pass_fold``), on whole cycles.

A bf16 checkpoint's store rounds by up to 2^-9 relative; one TF32 pass adds ~2^-11 a
product term. Mamba2's fp32-accurate fold takes two passes (``split_tf32_dot``), GDN's
three (tf32x3). This times the output_only route on the tuned table's configs with the
fold launches (both families) given each form's constexprs by a launcher in front of the
package's (``fp32_accurate``, ``one_pass``), both phases and the flush step, taking turns
over ``--rounds`` captures, against the fastest every-step baseline measured (the
standard kernel, the family's other baseline, ``always_flush``).

    python benchmarks/probe_one_pass_fold.py     # -> benchmarks/results/one_pass_fold.json
"""

from __future__ import annotations

import argparse

from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs, is_fold_launch
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops.common import exact_in_tf32
from trtllm_replayssm.ops.launch import launcher_in_front
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-4b", "qwen3.5-122b"], [128, 512],
                  "one_pass_fold.json")
    ap.set_defaults(state_dtypes=["bf16"])
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch, rig in case_rigs(args):
        L = rig.case.buffer_len
        route = Launch("output_only")
        baselines = {lc.kernel: lc for lc in (Launch("standard"), Launch("always_flush"), rig.baseline_launch())}
        timers = {k: (lambda lc=lc: rig.time_cycle_us(lc, args.replays)) for k, lc in baselines.items()}
        for fold in FORMS:
            def within(fn, front=fold_product(fold)):
                def timed():
                    with launcher_in_front(front):
                        return fn()
                return timed
            timers[(fold, "aligned")] = within(lambda: rig.time_cycle_us(route, args.replays))
            timers[(fold, "staggered")] = within(lambda: rig.time_cycle_us(route, args.replays, staggered=True))
            timers[(fold, "flush")] = within(lambda: rig.time_step_us(route, L - 1, args.replays))
        us = median_of_rounds(timers, args.rounds)
        baseline = fastest_baseline({k: us[k] for k in baselines})
        base_us = us[baseline]
        for fold in FORMS:
            log.add(model=name, state_dtype=dtype, batch=batch, L=L, fold=fold, baseline=baseline,
                    baseline_us_per_step=round(base_us, 2), us_per_step=round(us[(fold, "aligned")], 2),
                    speedup=round(base_us / us[(fold, "aligned")], 3),
                    staggered_us_per_step=round(us[(fold, "staggered")], 2),
                    staggered_speedup=round(base_us / us[(fold, "staggered")], 3),
                    flush_us=round(us[(fold, "flush")], 1), rounds=args.rounds)
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
