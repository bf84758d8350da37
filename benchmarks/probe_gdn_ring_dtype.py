#!/usr/bin/env python3
"""GDN's ``d``/``k`` ring in bf16 against fp32, on whole cycles, with a bf16 state.

The ring's dtype is chosen by drift (issue: replay within 1.5x of the standard kernel's
drift at 4096 steps; README, "GDN ring dtype"). With an fp32 state a bf16 ring is far
outside that (1844x), so that ring stays fp32. With a bf16 state the standard kernel rounds
its state every step and a bf16 ring is well inside it (``gdn_drift.py --state-dtype bf16``,
H100: standard 1.44e-2, replay 3.83e-3 with an fp32 ring, 4.48e-3 with a bf16 one), while
it halves the ring's bytes: a value head's entry is 388 bytes against 772 (Qwen3.5-4B:
K = V = 128, two value heads a key head), so a cycle of L = 16 steps (16 reads and one
write of a 32 KB bf16 state a value head, 135 ring entries read or appended) moves 8% fewer
bytes; so it is the default there since de6776a (``cache.gdn_ring_dtype``). This times the
``output_only`` route on the table's configs with each ring dtype, on two rigs of one case
(the same checkpoints, rings rounded to each dtype, and the same step inputs:
:func:`ring_rigs`), beside the baselines, all taking turns over rounds (``replayssm.md``
section 6): cycles in phase and staggered, and the flush and non-flush steps apart.

    python benchmarks/probe_gdn_ring_dtype.py     # -> benchmarks/results/gdn_ring_dtype.json
"""

from __future__ import annotations

import argparse
from typing import Dict

import torch

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, GDNRig, make_gdn_rig
from trtllm_replayssm.benchmarking.probes import DTYPES, add_case_args
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.models import model

RING_DTYPES = ("fp32", "bf16")


def ring_rigs(name: str, batch: int, state_dtype: str, buffer_len: int = 16) -> Dict[str, GDNRig]:
    """One rig of the case per ring dtype (:data:`RING_DTYPES`), with the first rig's
    checkpoints, rings (rounded to the other's dtype) and step inputs."""
    rigs = {rd: make_gdn_rig(GDNCase(name, model(name).geom, batch, buffer_len, DTYPES[state_dtype],
                                     ring_dtype=DTYPES[rd])) for rd in RING_DTYPES}
    first = rigs[RING_DTYPES[0]]
    for rig in list(rigs.values())[1:]:
        for field in ("ssm_state", "d_cache", "k_cache", "g_cache"):
            getattr(rig.cache, field).copy_(getattr(first.cache, field))
        rig.step = first.step
    return rigs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["qwen3.5-4b", "qwen3.5-122b"], [32, 128, 512], "gdn_ring_dtype.json")
    ap.set_defaults(state_dtypes=["bf16"])
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name in args.models:
        for sd in args.state_dtypes:
            for batch in args.batches:
                rigs = ring_rigs(name, batch, sd)
                base_rig, L, route = rigs["fp32"], rigs["fp32"].case.buffer_len, Launch("output_only")
                baselines = {lc.kernel: lc for lc in (Launch("standard"), Launch("always_flush"),
                                                      base_rig.baseline_launch())}
                timers = {k: (lambda lc=lc: base_rig.time_cycle_us(lc, args.replays)) for k, lc in baselines.items()}
                for rd, rig in rigs.items():
                    timers[(rd, "aligned")] = lambda r=rig: r.time_cycle_us(route, args.replays)
                    timers[(rd, "staggered")] = lambda r=rig: r.time_cycle_us(route, args.replays, staggered=True)
                    timers[(rd, "flush")] = lambda r=rig: r.time_step_us(route, L - 1, args.replays)
                    timers[(rd, "nonflush")] = lambda r=rig: r.time_step_us(route, L // 2, args.replays)
                us = median_of_rounds(timers, args.rounds)
                baseline = fastest_baseline({k: us[k] for k in baselines})
                base_us = us[baseline]
                for rd in rigs:
                    log.add(model=name, state_dtype=sd, ring_dtype=rd, batch=batch, L=L, baseline=baseline,
                            baseline_us_per_step=round(base_us, 2), us_per_step=round(us[(rd, "aligned")], 2),
                            speedup=round(base_us / us[(rd, "aligned")], 3),
                            staggered_us_per_step=round(us[(rd, "staggered")], 2),
                            staggered_speedup=round(base_us / us[(rd, "staggered")], 3),
                            flush_us=round(us[(rd, "flush")], 1), nonflush_us=round(us[(rd, "nonflush")], 1),
                            rounds=args.rounds)
                del rigs, base_rig, timers
                torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
