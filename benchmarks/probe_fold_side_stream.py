#!/usr/bin/env python3
"""The output_only route's fold launch on a second stream, beside the non-flush launch.

The two launches of a step serve disjoint rows (the non-flush launch skips the rows that
flush, the fold launch serves only those) and both only read the cursors, so they can
run at the same time. With staggered cursors 1/L of the rows fold at each step: a small
fold whose programs are chains of dependent loads (``probe_phased_heads.py``: ~30 us for
1/16 of the state at Super fp32 batch 128, where its bytes take ~16 us). This probe
times whole cycles, in phase and staggered (tuned table configs, fold PDL off), with the
step launched:
- ``package``: as the package launches it (non-flush, then fold, in one stream);
- ``fold_first``: the fold, then the non-flush launch, in one stream;
- ``side_stream``: the fold on a second stream forked before the non-flush launch and
  joined after it, for each layer (a branch of the captured graph);
- ``side_stream_high``: the same on a stream of the highest priority.

    python benchmarks/probe_fold_side_stream.py   # -> benchmarks/results/fold_side_stream.json
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Optional

import torch

from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs, is_fold_launch, is_nonflush_launch
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, median_of_rounds
from trtllm_replayssm.ops import launch
from trtllm_replayssm.ops.launch import launcher_in_front

MODES = ("package", "fold_first", "side_stream", "side_stream_high")


class FoldFirst:
    """Holds back the non-flush launch and makes it after the fold launch, which goes on
    ``side`` (forked from and joined to the current stream) or, with no ``side``, before
    it in the same stream."""

    def __init__(self, side: Optional[torch.cuda.Stream]):
        self.side, self.held = side, None

    def __call__(self, kernel, grid, kwargs) -> bool:
        if is_nonflush_launch(kernel, kwargs):
            self.held = (kernel, grid, kwargs)
            return True
        if not is_fold_launch(kernel, kwargs):
            return False
        if self.side is None:
            kernel[grid](**kwargs)
        else:
            main = torch.cuda.current_stream()
            self.side.wait_stream(main)
            with torch.cuda.stream(self.side):
                kernel[grid](**kwargs)
        held, self.held = self.held, None
        held[0][held[1]](**held[2])
        if self.side is not None:
            main.wait_stream(self.side)
        return True


@contextmanager
def step_form(mode: str):
    """The output_only step's launches in form ``mode`` (:data:`MODES`), fold PDL off (a
    programmatic launch of the fold needs the non-flush launch before it)."""
    saved = launch.FOLD_PDL
    launch.FOLD_PDL = False
    front = None
    if mode == "fold_first":
        front = FoldFirst(None)
    elif mode.startswith("side_stream"):
        _, high = torch.cuda.Stream.priority_range()
        front = FoldFirst(torch.cuda.Stream(priority=high if mode == "side_stream_high" else 0))
    try:
        with launcher_in_front(front):
            yield
    finally:
        launch.FOLD_PDL = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-super", "qwen3.5-122b", "nemotron-3-nano-4b", "qwen3.5-4b"], [32, 128, 512],
                  "fold_side_stream.json")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch, rig in case_rigs(args):
        base_launches = {"standard": Launch("standard")}
        if getattr(rig, "fla", None) is not None:
            base_launches["fla"] = Launch("fla")
        timers = {(k, "aligned"): (lambda lc=lc: rig.time_cycle_us(lc, args.replays)) for k, lc in base_launches.items()}

        def timed(mode, staggered):
            def run():
                with step_form(mode):
                    return rig.time_cycle_us(Launch("output_only"), args.replays, staggered)
            return run

        for mode in args.modes:
            for phase in ("aligned", "staggered"):
                timers[(mode, phase)] = timed(mode, phase == "staggered")
        us = median_of_rounds(timers, args.rounds)
        base = fastest_baseline({k: us[(k, "aligned")] for k in base_launches})
        for (mode, phase), t in us.items():
            if mode in base_launches:
                continue
            log.add(model=name, state_dtype=dtype, batch=batch, L=16, form=mode, phases=phase,
                    us_per_step=round(t, 2), baseline=base, baseline_us_per_step=round(us[(base, "aligned")], 2),
                    speedup=round(us[(base, "aligned")] / t, 3))
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
