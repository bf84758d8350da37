#!/usr/bin/env python3
"""What the output_only route's fold launch costs where no row flushes, and what a
programmatic dependent launch (PDL) of it gains (``ops.launch.FOLD_PDL``).

The fold launch runs on every step; on the 15 steps in 16 where no row flushes its
programs only find that out. This times the cycle, the flush step and a non-flush step
(same method as the benchmarks, tuned configs) with the fold launched plainly, as the
package launches it (PDL up to ``FOLD_PDL_MAX_HEAD_ROWS`` of the family), as a PDL at every batch size,
and skipped (a non-flush step's bound: no fold launch; the cycle and the flush step are
then wrong and not reported). Mamba2 and GDN, fp32 state, L = 16. With the AOT library
(``--library``, or the one the backend finds), ``aot`` times the package's launches
through it (programmatic dependent launches as built) and ``aot_plain`` the same kernels
launched plainly (``rs_set_programmatic_launches(0)``).

    python benchmarks/probe_fold_launch.py      # -> benchmarks/results/fold_launch.json
    python benchmarks/probe_fold_launch.py --modes package aot aot_plain --library build/libreplayssm_kernels.so
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from typing import Optional

import torch

from trtllm_replayssm.aot.backend import AOTLauncher
from trtllm_replayssm.aot.library import KernelLibrary, load
from trtllm_replayssm.benchmarking.probes import SkipLaunches, is_fold_launch
from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops import launch
from trtllm_replayssm.ops.launch import launcher_in_front


@contextmanager
def fold_launch(mode: str, library: Optional[KernelLibrary] = None):
    """The fold launched ``"plain"`` (no PDL), as the package launches it (``"package"``),
    as a programmatic dependent launch at every batch size (``"pdl_all"``), skipped, or as
    the package launches it through the AOT ``library`` (``"aot"``; ``"aot_plain"``: its
    programmatic kernels launched plainly)."""
    saved = launch.FOLD_PDL, dict(launch.FOLD_PDL_MAX_HEAD_ROWS)
    launch.FOLD_PDL = mode != "plain"
    if mode == "pdl_all":
        launch.FOLD_PDL_MAX_HEAD_ROWS = {family: 1 << 62 for family in saved[1]}
    front = SkipLaunches(is_fold_launch) if mode == "skip" else AOTLauncher(library, strict=True) if mode.startswith("aot") else None
    previous = library.set_programmatic_launches(mode != "aot_plain") if library is not None else None
    try:
        with launcher_in_front(front):
            yield
    finally:
        launch.FOLD_PDL, launch.FOLD_PDL_MAX_HEAD_ROWS = saved
        if library is not None:
            library.set_programmatic_launches(previous)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 32, 128, 512])
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--modes", nargs="+", default=["plain", "package", "pdl_all", "skip"],
                    choices=["plain", "package", "pdl_all", "skip", "aot", "aot_plain"])
    ap.add_argument("--library", default=None, help="libreplayssm_kernels.so for the aot modes (default: found)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/fold_launch.json"))
    args = ap.parse_args()
    library = None
    if any(m.startswith("aot") for m in args.modes):
        library = load(args.library)
        if library is None:
            ap.error("the aot modes need libreplayssm_kernels (--library)")
    log = ProbeLog(args.out)
    for name in args.models:
        for batch in args.batches:
            rig = make_model_rig(name, batch, 16, torch.float32)
            base = rig.time_cycle_us(rig.baseline_launch(), args.replays)
            for mode in args.modes:
                with fold_launch(mode, library):
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
