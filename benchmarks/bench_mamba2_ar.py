#!/usr/bin/env python3
"""Mamba2 autoregressive decode benchmark: tuned standard kernel vs ReplaySSM routes.

Method: ``replayssm.md`` section 6 (whole L-step cycles, cold L2, CUDA graphs, median,
copy bandwidth in the same run). Every kernel is tuned over its launch configs for each
case; the winners become the dispatcher's table (``--table-out``) and the ``auto`` rows
measure the dispatcher itself.

    python benchmarks/bench_mamba2_ar.py                      # full run (H200: ~6 min)
    python benchmarks/bench_mamba2_ar.py --models nemotron-3-super --batches 128 --state-dtypes fp32
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.mamba2_ar import KERNELS, Mamba2Case, Mamba2Rig, candidate_configs, make_rig, tune
from trtllm_replayssm.benchmarking.timing import copy_bandwidth_gbps
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.mamba2 import launch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
REPO = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return os.environ.get("REPLAYSSM_COMMIT", "unknown")


def _warm_group(args):
    """Compile every candidate of one specialisation group (a worker process)."""
    model, state_dtype, L, batch = args
    import torch  # noqa: F401  (fresh process)
    case = Mamba2Case(model, mamba2_model(model).geom, batch, L, DTYPES[state_dtype])
    rig = Mamba2Rig(case, 1)
    n = 0
    for kernel in KERNELS:
        for cfg in candidate_configs(kernel, case.geom.headdim):
            try:
                rig.layer_step(kernel, 0, cfg)
                rig.cache.advance(rig.slot_idx, route=kernel) if kernel != "standard" else None
                n += 1
            except Exception:
                pass
    torch.cuda.synchronize()
    return n


def warm_compile(groups, workers: int) -> None:
    """Triton compiles one kernel at a time per process; fill its disk cache in parallel."""
    t = time.time()
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        n = sum(ex.map(_warm_group, groups))
    print(f"warm compile: {n} launches in {len(groups)} groups, {time.time() - t:.0f}s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-nano-4b", "nemotron-3-super"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 128, 256, 512])
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--l-sweep", nargs="*", type=int, default=[8, 16, 32], help="L values swept at --l-sweep-batch")
    ap.add_argument("--l-sweep-batch", type=int, default=128)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--warm-workers", type=int, default=min(14, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_ar.json"))
    ap.add_argument("--table-out", default=None, help="tuned table (default: the package's tuned/mamba2_<arch>.json)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("this benchmark needs a CUDA GPU")
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    arch = f"sm{''.join(map(str, torch.cuda.get_device_capability(dev)))}"
    table_path = Path(args.table_out) if args.table_out else REPO / f"trtllm_replayssm/tuned/mamba2_{arch}.json"
    table = json.loads(table_path.read_text()) if table_path.exists() else {}
    commit = git_commit()

    cases = [(m, sd, b, args.buffer_len) for sd in args.state_dtypes for m in args.models for b in args.batches]
    cases += [(m, "fp32", args.l_sweep_batch, L) for m in args.models for L in args.l_sweep if L != args.buffer_len]
    groups = sorted({(m, sd, L, 8) for m, sd, b, L in cases})
    if args.warm_workers > 1:
        warm_compile(groups, args.warm_workers)

    copy_gbps = copy_bandwidth_gbps()
    print(f"{gpu} ({arch}): copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    records, rows = [], []
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    for model, sd, batch, L in cases:
        case = Mamba2Case(model, mamba2_model(model).geom, batch, L, DTYPES[sd])
        rig = make_rig(case)
        t0 = time.time()
        best = {k: tune(rig, k, candidate_configs(k, case.geom.headdim)) for k in KERNELS}
        base_us = best["standard"]["us"]
        route = min(("output_only", "state_and_output", "always_flush"), key=lambda k: best[k]["us"])
        if L == args.buffer_len:  # the dispatcher's table is for the default L
            for k in KERNELS:
                key = launch.table_key(k, case.state_dtype, case.act_dtype, case.geom.headdim, case.geom.dstate)
                entries = [e for e in table.get(key, []) if e["batch"] != batch]
                table[key] = sorted(entries + [{"batch": batch, **best[k]["config"].to_dict(), "us": round(best[k]["us"], 2)}],
                                    key=lambda e: e["batch"])
            key = launch.table_key("route", case.state_dtype, case.act_dtype, case.geom.headdim, case.geom.dstate)
            entries = [e for e in table.get(key, []) if e["batch"] != batch]
            table[key] = sorted(entries + [{"batch": batch, "route": route}], key=lambda e: e["batch"])
            table_path.parent.mkdir(parents=True, exist_ok=True)
            table_path.write_text(json.dumps(table, indent=1, sort_keys=True))
            launch._load_table.cache_clear()

        def record(kernel, us, cfg, chosen=None, nonflush_us=None):
            moved = case.moved_bytes_per_cycle(chosen or kernel)
            gbps = moved / (us * 1e-6 * L) / 1e9
            rec = dict(gpu=gpu, model=model, state_dtype=sd, act_dtype="bf16", batch=batch, L=L,
                       route=kernel if kernel != "auto" else "auto", chosen_route=chosen or kernel,
                       us_per_step=round(us, 3), baseline_us_per_step=round(base_us, 3),
                       speedup=round(base_us / us, 3), achieved_gbps=round(gbps, 1), copy_gbps=round(copy_gbps, 1),
                       config=cfg.to_dict() if cfg else None, commit=commit)
            if nonflush_us is not None:
                rec["nonflush_us_per_step"] = round(nonflush_us, 3)
                rec["nonflush_read_gbps"] = round(case.state_bytes / (nonflush_us * 1e-6) / 1e9, 1)
                rec["nonflush_read_share_of_copy"] = round(rec["nonflush_read_gbps"] / copy_gbps, 3)
            records.append(rec)
            return rec

        for k in KERNELS:
            cfg = best[k]["config"]
            us = rig.time_cycle_us(k, cfg, args.replays)
            nf = rig.time_nonflush_us(k, cfg, args.replays) if k in ("output_only", "state_and_output") else None
            if k == "standard":
                base_us = us
            record(k, us, cfg, nonflush_us=nf)
        if L == args.buffer_len:
            # The dispatcher end to end: route and config from the table just written.
            auto_route = launch.select_route(arch, case.state_dtype, case.act_dtype, case.geom.headdim,
                                             case.geom.dstate, batch)
            rec = record("auto", rig.time_cycle_us(auto_route, None, args.replays), None, chosen=auto_route)
            rows.append([model, sd, batch, L, f"{base_us:.1f}"] +
                        [f"{r['speedup']:.2f}" for r in records[-5:-1][1:]] + [f"{rec['speedup']:.2f} ({auto_route})"])
        print(f"{model} {sd} bs{batch} L{L}: " + ", ".join(f"{r['route']} {r['us_per_step']:.1f}us x{r['speedup']:.2f}"
                                                        for r in records if r['model'] == model and r['state_dtype'] == sd
                                                        and r['batch'] == batch and r['L'] == L)
              + f" [{time.time() - t0:.0f}s]", flush=True)
        out_path.write_text(json.dumps(records, indent=1))
        del rig
        torch.cuda.empty_cache()

    print(tabulate(rows, headers=["model", "state", "batch", "L", "standard us", "output_only", "state_and_output",
                                  "always_flush", "auto"]))
    print(f"wrote {out_path} and {table_path}")


if __name__ == "__main__":
    main()
