#!/usr/bin/env python3
"""GDN autoregressive decode benchmark: ReplaySSM vs the fastest of the tuned baselines.

Method: ``replayssm.md`` section 6, as ``bench_mamba2_ar.py``. Baselines: the in-tree
standard kernel (tuned per case), fla-core's ``fused_recurrent_gated_delta_rule``
(carry its pure-Python wheel and einops', its one dependency, to the GPU; its rows are
skipped when it is not importable) and the replay kernel's flush-every-step routes
(``benchmarking.rig.fastest_baseline``).
``speedup`` is against the fastest, named in ``baseline``. Winners go to the
dispatcher's table ``tuned/gdn_<arch>.json``.

    python benchmarks/bench_gdn_ar.py                         # H200
    python benchmarks/bench_gdn_ar.py --dry-run --models tiny-gdn --batches 2 --buffer-len 2 \\
        --max-candidates 1 --out /tmp/gdn.json --table-dir /tmp  # CPU: the flow only
    python benchmarks/bench_gdn_ar.py --from-table             # the table's configs, measured again
    python benchmarks/bench_gdn_ar.py --tune standard always_flush  # tune those; the rest as in the table

Rounds, the two phases of a replay route's cycle (in phase and staggered) and how the
tuners and the route table use them: as ``bench_mamba2_ar.py``. So is the warm compile:
``--warm-workers`` processes compile the candidates the run tunes before it times them
(``benchmarking.warm_compile``; for GDN not yet run on a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.gdn_ar import (ROUTES, TUNABLE, GDNCase, fla_fused_recurrent, make_gdn_rig,
                                                  tune_gdn_case, warm_group)
from trtllm_replayssm.benchmarking.probes import DTYPE_NAMES, DTYPES
from trtllm_replayssm.benchmarking.records import (DRY_RUN_DIR, PACKAGE_TABLES, RESULTS, ResultsFile, TriedLog,
                                                   committed_or_scratch, git_commit, open_table, save_tuned_case)
from trtllm_replayssm.benchmarking.rig import (Launch, fastest_baseline, launches_on, time_flush_and_nonflush_steps,
                                               time_phases_side_by_side, worst_phase)
from trtllm_replayssm.benchmarking.timing import copy_bandwidth_gbps
from trtllm_replayssm.benchmarking.warm_compile import swept_kernels, warm_compile
from trtllm_replayssm.cache import gdn_ring_dtype
from trtllm_replayssm.models import model
from trtllm_replayssm.ops import launch as launch_table
from trtllm_replayssm.ops.launch import BATCH_POINTS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCH_POINTS))
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--ring-dtype", default=None, choices=list(DTYPES),
                    help="d and k ring dtype (default: the package's for each state dtype, cache.gdn_ring_dtype: "
                         "the drift study's choice)")
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the final side-by-side timing")
    ap.add_argument("--from-table", action="store_true",
                    help="no tuning: measure the configs of the table in --table-dir (left as it is)")
    ap.add_argument("--tune", nargs="+", default=list(TUNABLE), choices=TUNABLE,
                    help="launches to tune (replay: the fold and the non-flush launch; fold: the fold alone; "
                         "nonflush: the non-flush launch alone); "
                         "the others keep the table's")
    ap.add_argument("--max-candidates", type=int, default=None)
    ap.add_argument("--warm-workers", type=int, default=min(14, os.cpu_count() or 1),
                    help="processes that compile the tuned launches' candidates before the timing (1: none)")
    ap.add_argument("--out", default=None,
                    help=f"default: {RESULTS.name}/gdn_ar.json (a dry run's: under {DRY_RUN_DIR})")
    ap.add_argument("--table-dir", default=None,
                    help="where the tuned table is read and written (default: the package's; a dry run's under "
                         f"{DRY_RUN_DIR}); a folder "
                         "without the GPU's table starts from a copy of the package's")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run the flow eagerly, nothing measured")
    ap.add_argument("--tried-out", default=None, metavar="PATH",
                    help="write every tuning candidate's time (worst phase's cycle), one record a tuned kernel "
                         "and case: what the winner beat (default: not kept)")
    ap.add_argument("--fold-pdl-limit", type=int, default=None, metavar="HEAD_ROWS",
                    help="batch rows x value heads up to which the fold is a programmatic launch, beyond which it "
                         "goes on the side stream (default: ops.launch.FOLD_PDL_MAX_HEAD_ROWS['gdn'])")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "gdn_ar.json", args.dry_run)
    args.table_dir = committed_or_scratch(args.table_dir, PACKAGE_TABLES, args.dry_run)
    if args.fold_pdl_limit is not None:
        launch_table.FOLD_PDL_MAX_HEAD_ROWS = {**launch_table.FOLD_PDL_MAX_HEAD_ROWS, "gdn": args.fold_pdl_limit}
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    if torch.cuda.is_available():
        gpu, arch = torch.cuda.get_device_name(), launch_table.device_table_tag(torch.device("cuda"))
    else:
        gpu, arch, args.warm_workers = "none (dry run)", "cpu", 0
    results = ResultsFile(args.out, gpu, merge=not args.dry_run)
    table, table_path = open_table(args.table_dir, "gdn", arch)  # the dispatcher ("auto") reads it too

    def ring_dtype(state_dtype: str) -> torch.dtype:
        return DTYPES[args.ring_dtype] if args.ring_dtype else gdn_ring_dtype(DTYPES[state_dtype])

    commit, copy_gbps = git_commit(), copy_bandwidth_gbps()
    tried_log = TriedLog(args.tried_out, gpu, commit)
    print(f"{gpu} ({arch}): copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    if torch.cuda.is_available() and fla_fused_recurrent() is None:
        print("warning: fla-core is not importable here (install it with einops); its baseline rows are skipped",
              flush=True)
    records, rows = [], []
    L = args.buffer_len
    if args.warm_workers > 1 and not args.from_table:
        warm_compile(warm_group, [(m, DTYPES[sd], ring_dtype(sd), L, k) for sd in args.state_dtypes
                                  for m in args.models for k in swept_kernels(args.tune)], args.warm_workers)

    for sd in args.state_dtypes:
        for name in args.models:
            for batch in args.batches:
                m = model(name)
                case = GDNCase(name, m.geom, batch, L, DTYPES[sd], ring_dtype=ring_dtype(sd))
                rig = make_gdn_rig(case)
                t0 = time.time()
                tuned = {} if args.from_table else tune_gdn_case(rig, limit=args.max_candidates, kernels=args.tune)
                tried_log.add(tuned, model=name, state_dtype=sd, ring_dtype=DTYPE_NAMES[case.ring_dtype], batch=batch,
                              L=L)
                best = {**rig.table_configs(arch), **tuned}
                launches = launches_on(best, ("standard",) + ROUTES)
                if rig.fla is not None and torch.cuda.is_available():
                    launches["fla"] = Launch("fla")
                by_phase = time_phases_side_by_side(rig, launches, args.replays, args.rounds)
                us, staggered_us = by_phase["aligned"], by_phase["staggered"]
                baseline = fastest_baseline(us)
                route = min(ROUTES, key=worst_phase(by_phase).__getitem__)  # never slower in either phase
                if not args.from_table:
                    save_tuned_case(table, table_path, rig, tuned, route)
                auto = rig.table_route(arch)
                launches["auto"] = Launch(auto)
                by_phase = time_phases_side_by_side(rig, {"auto": launches["auto"]}, args.replays, args.rounds)
                us["auto"], staggered_us["auto"] = by_phase["aligned"]["auto"], by_phase["staggered"]["auto"]
                for k, t in us.items():
                    lc = launches[k]
                    records.append(dict(
                        gpu=gpu, model=name, state_dtype=sd, act_dtype="bf16", ring_dtype=DTYPE_NAMES[case.ring_dtype],
                        batch=batch, L=L, route=k, chosen_route=lc.kernel, baseline=baseline, us_per_step=round(t, 3),
                        baseline_us_per_step=round(us[baseline], 3), speedup=round(us[baseline] / t, 3),
                        achieved_gbps=round(case.moved_bytes_per_cycle(lc.kernel) / (t * 1e-6 * L) / 1e9, 1),
                        copy_gbps=round(copy_gbps, 1), config=lc.config.to_dict() if lc.config else None,
                        fold_config=lc.fold_config.to_dict() if lc.fold_config else None, commit=commit))
                    if rig.keeps_ring(lc):
                        records[-1]["staggered_us_per_step"] = round(staggered_us[k], 3)
                        records[-1]["staggered_speedup"] = round(us[baseline] / staggered_us[k], 3)
                    if k == "output_only" and torch.cuda.is_available():  # where the cycle's time goes
                        rec = records[-1]
                        flush, nf = time_flush_and_nonflush_steps(rig, lc, args.replays, args.rounds)
                        rec["nonflush_us_per_step"] = round(nf, 3)
                        rec["nonflush_read_share_of_copy"] = round(case.state_bytes / (nf * 1e-6) / 1e9 / copy_gbps, 3)
                        rec["flush_us_per_step"] = round(flush, 3)
                rows.append([name, sd, batch, baseline, f"{us[baseline]:.1f}", f"{us['output_only']:.1f}",
                             f"{us[baseline] / us['output_only']:.2f}x", f"{us[baseline] / us['auto']:.2f}x ({auto})",
                             f"{us[baseline] / staggered_us['output_only']:.2f}x",
                             f"{us[baseline] / staggered_us['auto']:.2f}x"])
                print(rows[-1], f"[{time.time() - t0:.0f}s]", flush=True)
                results.write(records)
                del rig
                torch.cuda.empty_cache()
    print(tabulate(rows, headers=["model", "state", "batch", "faster baseline", "baseline us", "output_only us",
                                  "output_only", "auto (route)", "output_only staggered", "auto staggered"]))


if __name__ == "__main__":
    main()
