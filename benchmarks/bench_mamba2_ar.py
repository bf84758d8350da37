#!/usr/bin/env python3
"""Mamba2 autoregressive decode benchmark: tuned standard kernel vs ReplaySSM routes.

Method: ``replayssm.md`` section 6 (whole L-step cycles, cold L2, CUDA graphs, median,
copy bandwidth in the same run). Every kernel is tuned over its launch configs for each
case; the winners become the dispatcher's table (the package's ``tuned/mamba2_<arch>.json``)
and the ``auto`` rows time the dispatcher itself, reading that table. ``speedup`` is
against the fastest launch measured that writes the state every step (the standard kernel
or a flush-every-step route: ``benchmarking.rig.fastest_baseline``), named in ``baseline``.

    python benchmarks/bench_mamba2_ar.py                      # full run (H200: ~14 min)
    python benchmarks/bench_mamba2_ar.py --models nemotron-3-super --batches 128 --state-dtypes fp32
    python benchmarks/bench_mamba2_ar.py --from-table             # the table's configs, measured again
    python benchmarks/bench_mamba2_ar.py --batches 32 --l-sweep   # a bare --l-sweep: no L sweep
    python benchmarks/bench_mamba2_ar.py --tune standard always_flush  # tune those; the rest as in the table

The compared launches take turns over ``--rounds`` rounds, a capture each, and each
reports its median (see ``benchmarking.rig.time_phases_side_by_side``); so do the output_only
route's flush and non-flush steps (``benchmarking.rig.time_flush_and_nonflush_steps``).
A replay route's cycle is timed with the rows in phase (every cursor from 0: the method's
cycle, ``us_per_step``) and with staggered cursors (1/L of the rows flushing at every
step, a server's steady state: ``staggered_us_per_step``); the tuners keep the config
whose slower phase is fastest, and the route table takes a replay route only where it is
fastest in both (``benchmarking.rig.worst_phase``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.mamba2_ar import ROUTES, TUNABLE, Launch, Mamba2Case, make_rig, tune_case, warm_group
from trtllm_replayssm.benchmarking.rig import (fastest_baseline, launches_on, time_flush_and_nonflush_steps,
                                               time_phases_side_by_side, worst_phase)
from trtllm_replayssm.benchmarking.records import (DRY_RUN_DIR, PACKAGE_TABLES, RESULTS, ResultsFile, TriedLog,
                                                   committed_or_scratch, git_commit, open_table, save_tuned_case)
from trtllm_replayssm.benchmarking.timing import copy_bandwidth_gbps
from trtllm_replayssm.benchmarking.warm_compile import swept_kernels, warm_compile
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.launch import BATCH_POINTS, device_table_tag

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-nano-4b", "nemotron-3-super"])
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCH_POINTS))
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--l-sweep", nargs="*", type=int, default=[8, 16, 32],
                    help="L values swept at --l-sweep-batch, fp32 (a bare --l-sweep: none)")
    ap.add_argument("--l-sweep-batch", type=int, default=128)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the final side-by-side timing")
    ap.add_argument("--from-table", action="store_true",
                    help="no tuning: measure the configs of the table in --table-dir (left as it is; "
                         "the L sweep runs the default L's configs)")
    ap.add_argument("--warm-workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--out", default=None,
                    help=f"default: {RESULTS.name}/mamba2_ar.json (a dry run's: under {DRY_RUN_DIR})")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: run the whole flow eagerly in the interpreter (nothing measured); "
                         "use with --models tiny")
    ap.add_argument("--table-dir", default=None,
                    help="where the tuned table is read and written (default: the package's; a dry run's under "
                         f"{DRY_RUN_DIR}); a folder "
                         "without the GPU's table starts from a copy of the package's")
    ap.add_argument("--tried-out", default=None, metavar="PATH",
                    help="write every tuning candidate's time (worst phase's cycle), one record a tuned kernel "
                         "and case: what the winner beat (default: not kept)")
    ap.add_argument("--max-candidates", type=int, default=None, help="tune over the first N configs of each kernel")
    ap.add_argument("--tune", nargs="+", default=list(TUNABLE), choices=TUNABLE,
                    help="launches to tune (replay: the fold and the non-flush launch; fold: the fold alone; "
                         "nonflush: the non-flush launch alone); "
                         "the others keep the table's")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "mamba2_ar.json", args.dry_run)
    args.table_dir = committed_or_scratch(args.table_dir, PACKAGE_TABLES, args.dry_run)

    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    if torch.cuda.is_available():
        gpu, arch = torch.cuda.get_device_name(), device_table_tag(torch.device("cuda"))
    else:
        gpu, arch, args.warm_workers = "none (dry run)", "cpu", 0
    results = ResultsFile(args.out, gpu, merge=not args.dry_run)
    table, table_path = open_table(args.table_dir, "mamba2", arch)  # the dispatcher ("auto") reads it too
    commit = git_commit()
    tried_log = TriedLog(args.tried_out, gpu, commit)

    cases = [(m, sd, b, args.buffer_len) for sd in args.state_dtypes for m in args.models for b in args.batches]
    cases += [(m, "fp32", args.l_sweep_batch, L) for m in args.models for L in args.l_sweep if L != args.buffer_len]
    if args.warm_workers > 1 and not args.from_table:
        warm_compile(warm_group, [(m, DTYPES[sd], L, k) for m, sd, _, L in cases for k in swept_kernels(args.tune)],
                     args.warm_workers)

    copy_gbps = copy_bandwidth_gbps()
    print(f"{gpu} ({arch}): copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    records, rows = [], []

    for model, sd, batch, L in cases:
        case = Mamba2Case(model, mamba2_model(model).geom, batch, L, DTYPES[sd])
        rig = make_rig(case)
        t0 = time.time()
        tuned = {} if args.from_table else tune_case(rig, limit=args.max_candidates, kernels=args.tune)
        tried_log.add(tuned, model=model, state_dtype=sd, batch=batch, L=L)
        best = {**rig.table_configs(arch), **tuned}
        launches = launches_on(best, ("standard",) + ROUTES)
        by_phase = time_phases_side_by_side(rig, launches, args.replays, args.rounds)
        cycle_us, staggered_us = by_phase["aligned"], by_phase["staggered"]
        baseline = fastest_baseline(cycle_us)
        base_us = cycle_us[baseline]
        route = min(ROUTES, key=worst_phase(by_phase).__getitem__)  # never slower in either phase
        if L == args.buffer_len:  # the dispatcher's table is for the default L
            if not args.from_table:
                save_tuned_case(table, table_path, rig, tuned, route)
            auto_route = rig.table_route(arch)
            launches["auto"] = Launch(auto_route)
            auto = time_phases_side_by_side(rig, {"auto": launches["auto"]}, args.replays, args.rounds)
            cycle_us["auto"], staggered_us["auto"] = auto["aligned"]["auto"], auto["staggered"]["auto"]

        for k, us in cycle_us.items():
            lc = launches[k]
            chosen = lc.kernel
            rec = dict(gpu=gpu, model=model, state_dtype=sd, act_dtype="bf16", batch=batch, L=L, route=k,
                       chosen_route=chosen, baseline=baseline, us_per_step=round(us, 3),
                       baseline_us_per_step=round(base_us, 3),
                       speedup=round(base_us / us, 3),
                       achieved_gbps=round(case.moved_bytes_per_cycle(chosen) / (us * 1e-6 * L) / 1e9, 1),
                       copy_gbps=round(copy_gbps, 1),
                       config=lc.config.to_dict() if lc.config else None,
                       fold_config=lc.fold_config.to_dict() if lc.fold_config else None, commit=commit)
            if rig.keeps_ring(lc):
                rec["staggered_us_per_step"] = round(staggered_us[k], 3)
                rec["staggered_speedup"] = round(base_us / staggered_us[k], 3)
            if k == "output_only":
                flush, nf = time_flush_and_nonflush_steps(rig, lc, args.replays, args.rounds)
                rec["nonflush_us_per_step"] = round(nf, 3)
                rec["nonflush_read_gbps"] = round(case.state_bytes / (nf * 1e-6) / 1e9, 1)
                rec["nonflush_read_share_of_copy"] = round(rec["nonflush_read_gbps"] / copy_gbps, 3)
                rec["flush_us_per_step"] = round(flush, 3)
            records.append(rec)
        if "auto" in cycle_us:
            rows.append([model, sd, batch, L, f"{base_us:.1f} ({baseline})"]
                        + [f"{base_us / cycle_us[k]:.2f}" for k in ROUTES]
                        + [f"{base_us / cycle_us['auto']:.2f} ({launches['auto'].kernel})",
                           f"{base_us / staggered_us['output_only']:.2f}", f"{base_us / staggered_us['auto']:.2f}"])
        print(f"{model} {sd} bs{batch} L{L}: " + ", ".join(f"{k} {us:.1f}us x{base_us / us:.2f}" for k, us in cycle_us.items())
              + f" [{time.time() - t0:.0f}s]", flush=True)
        results.write(records)
        del rig
        torch.cuda.empty_cache()

    print(tabulate(rows, headers=["model", "state", "batch", "L", "baseline us", *ROUTES, "auto",
                                  "output_only staggered", "auto staggered"]))
    print(f"wrote {args.out}" + ("" if args.from_table else f" and {table_path}"))


if __name__ == "__main__":
    main()
