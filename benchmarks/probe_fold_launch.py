#!/usr/bin/env python3
"""What the output_only route's fold launch costs where no row flushes, and whether a
programmatic dependent launch (PDL) hides it.

The fold launch runs on every step; on the 15 steps in 16 where no row flushes its
programs only find that out. This times the cycle, the flush step and a non-flush step
(same method as the benchmarks, tuned configs) with the fold launched as the package
launches it, with it skipped (a non-flush step's bound: no fold launch; the cycle and the
flush step are then wrong and not reported) and with it launched under PDL (``launch_pdl``:
it may start while the non-flush launch's last programs run; it reads nothing that launch
writes). Mamba2 and GDN, fp32 state, L = 16.

    python benchmarks/probe_fold_launch.py      # -> benchmarks/results/fold_launch.json
"""

from __future__ import annotations

import argparse

import torch

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, make_gdn_rig
from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Case, make_rig
from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.models import GDNGeometry, model
from trtllm_replayssm.ops.gdn import replay as gdn_replay
from trtllm_replayssm.ops.launch import launcher_in_front
from trtllm_replayssm.ops.mamba2 import replay as mamba2_replay
from trtllm_replayssm.ops.mamba2 import replay_fold


class FoldLaunch:
    """A launcher that skips the fold launch (``"skip"``) or makes it with PDL: ``"pdl"``
    (it may start as the non-flush launch's last programs finish), ``"pdl_early"`` (the
    non-flush launch's programs let it start as soon as each of them has started) or
    ``"pdl_early_wait"`` (and each fold program waits for the non-flush launch to complete
    before it exits, so that the fold's completion implies it)."""

    def __init__(self, mode: str):
        self.mode = mode

    def __call__(self, kernel, grid, kwargs) -> bool:
        fold = kernel is replay_fold._replay_fold_kernel or (
            kernel is gdn_replay._gdn_replay_kernel and kwargs.get("MODE") == gdn_replay.FOLD.value)
        nonflush = (kernel is mamba2_replay._replay_step_kernel and kwargs.get("MODE") == mamba2_replay.NONFLUSH.value
                    ) or (kernel is gdn_replay._gdn_replay_kernel and kwargs.get("MODE") == gdn_replay.NONFLUSH.value)
        if nonflush and self.mode.startswith("pdl_early"):
            kernel[grid](**kwargs, LAUNCH_DEPENDENTS=True)
            return True
        if not fold:
            return False
        if self.mode.startswith("pdl"):
            kernel[grid](**kwargs, launch_pdl=True, **({"WAIT_PRIMARY": True} if self.mode.endswith("wait") else {}))
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 32, 128, 512])
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--modes", nargs="+", default=["package", "skip", "pdl", "pdl_early", "pdl_early_wait"])
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/fold_launch.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name in args.models:
        geom = model(name).geom
        for batch in args.batches:
            if isinstance(geom, GDNGeometry):
                rig = make_gdn_rig(GDNCase(name, geom, batch, 16, torch.float32))
                base = rig.time_cycle_us(Launch("fla" if rig.fla is not None else "standard"), args.replays)
            else:
                rig = make_rig(Mamba2Case(name, geom, batch, 16, torch.float32))
                base = rig.time_cycle_us(Launch("standard"), args.replays)
            for mode in args.modes:
                with launcher_in_front(None if mode == "package" else FoldLaunch(mode)):
                    cycle, flush, nonflush = time_cycle_and_steps(rig, Launch("output_only"), args.replays)
                timed = dict(nonflush_us=round(nonflush, 2)) if mode == "skip" else dict(
                    us_per_step=round(cycle, 2), speedup=round(base / cycle, 3), flush_us=round(flush, 1),
                    nonflush_us=round(nonflush, 2))
                log.add(model=name, batch=batch, state_dtype="fp32", L=16, fold_launch=mode,
                        baseline_us_per_step=round(base, 2), **timed)
            del rig
            torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
