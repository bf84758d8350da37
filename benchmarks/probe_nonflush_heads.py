#!/usr/bin/env python3
"""Mamba2 output_only route: the non-flush launch over several heads of a group
(``heads_per_prog``, the group's ``B_j . C`` dots shared) and with ``S_0 C`` on the
tensor cores (``fold_dot``), and the fold launch under register caps, on whole cycles.

Each case times the standard kernel, the tuned table's route, then every non-flush
config with the tuned fold config, then the tuned fold config (and one program per head
and row) under each register cap with the tuned non-flush config; the flush and the
non-flush step apart as in ``bench_mamba2_ar.py``.

    python benchmarks/probe_nonflush_heads.py    # -> benchmarks/results/mamba2_nonflush_heads.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm._runtime import device_arch
from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Case, candidate_configs, make_rig
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.launch import LaunchConfig, select_config
from trtllm_replayssm.ops.mamba2 import replay_fold

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FOLD_CAPS = [None, 168, 128]
FOLD_PER_HEAD = LaunchConfig(16, 2, 1, 1, 1, 0, 8)  # a program per (head, row): the fastest flush step alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_nonflush_heads.json"))
    args = ap.parse_args()
    records = []

    def record(case, rig, std, variant, launch, steps=True):
        us = rig.time_cycle_us(launch)
        rec = dict(gpu=torch.cuda.get_device_name(), model=case.model, state_dtype=str(case.state_dtype)[6:],
                   batch=case.batch, L=16, variant=variant, us_per_step=round(us, 2),
                   standard_us_per_step=round(std, 2), speedup=round(std / us, 3),
                   nonflush_us=round(rig.time_step_us(launch, 8), 1),
                   flush_us=round(rig.time_step_us(launch, 15), 1) if steps else None, commit=git_commit())
        records.append(rec)
        print(rec, flush=True)
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")

    for name in args.models:
        geom = mamba2_model(name).geom
        for sd in args.state_dtypes:
            for batch in args.batches:
                case = Mamba2Case(name, geom, batch, 16, DTYPES[sd])
                rig = make_rig(case)
                arch = device_arch(torch.device("cuda"))

                def tuned(kernel):
                    return select_config(kernel, arch, case.state_dtype, case.act_dtype, geom.headdim, geom.dstate,
                                         batch, nheads=geom.nheads)

                nonflush, fold = tuned("output_only"), tuned("fold")
                std = rig.time_cycle_us(Launch("standard"))
                record(case, rig, std, f"tuned nonflush {nonflush} fold {fold}", Launch("output_only", nonflush, fold))
                for cfg in candidate_configs("output_only", geom.headdim):
                    if cfg.heads_per_prog > 1 or cfg.fold_dot:
                        record(case, rig, std, f"nonflush {cfg}", Launch("output_only", cfg, fold), steps=False)
                for fold_cfg in (fold, FOLD_PER_HEAD):
                    for cap in FOLD_CAPS:
                        replay_fold.FOLD_MAXNREG = cap
                        try:
                            record(case, rig, std, f"fold {fold_cfg} maxnreg {cap}",
                                   Launch("output_only", nonflush, fold_cfg))
                        finally:
                            replay_fold.FOLD_MAXNREG = None
                del rig
                torch.cuda.empty_cache()
    print(tabulate([{k: r[k] for k in ("model", "state_dtype", "batch", "variant", "speedup", "nonflush_us",
                                       "flush_us")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
