#!/usr/bin/env python3
"""Model-level autoregressive decode: standard SSM kernels vs ReplaySSM in one process.

A hybrid decoder at a real model's shapes (random bf16 weights, ``trtllm_replayssm.e2e``)
decodes greedily, one CUDA graph per batch size and path; ms/step is the mean over
``--num-steps`` consecutive steps (ring flushes included) after ``--warmup-steps``. Over
the warm-up the ReplaySSM path is fed the standard path's tokens, and the last logits of
the two are compared (relative L2 error). The standard step is also timed with each
block kind left out, which gives the SSM / attention / MLP shares of its time. Records go
to ``benchmarks/results/e2e.json`` (replacing those of the same case).

    python benchmarks/e2e_decode_speedup.py --model nemotron-3-nano-4b --batch-size 128 512
    python benchmarks/e2e_decode_speedup.py --dry-run     # CPU: tiny model, interpreter, flow only
"""

from __future__ import annotations

import argparse
import sys

import torch
from tabulate import tabulate
from tqdm import tqdm

from trtllm_replayssm.benchmarking.records import DRY_RUN_DIR, RESULTS, ResultsFile, committed_or_scratch, git_commit
from trtllm_replayssm.e2e import HybridDecoder, hybrid_config
from trtllm_replayssm.e2e.bench import compare_paths, step_shares

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: nemotron-3-nano-4b (GPU), tiny-hybrid (--dry-run)")
    ap.add_argument("--batch-size", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--warmup-steps", type=int, default=16)
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--state-dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--route", default="output_only", help="ReplaySSM route (output_only, always_flush, auto)")
    ap.add_argument("--staggered", action="store_true",
                    help="spread the ReplaySSM path's cursors over the L phases during the warm-up (a server's "
                         "steady state) instead of starting them all at 0")
    ap.add_argument("--out", default=None, help=f"default: {RESULTS.name}/e2e.json (a dry run's: under {DRY_RUN_DIR})")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: tiny model in the interpreter, nothing measured")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "e2e.json", args.dry_run)
    gpu = torch.cuda.is_available()
    if args.staggered and args.warmup_steps < args.buffer_len:
        sys.exit("--staggered needs --warmup-steps >= --buffer-len (the staggering steps run in the warm-up)")
    if not gpu and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    gpu_name = torch.cuda.get_device_name() if gpu else "none (dry run)"
    results = ResultsFile(args.out, gpu_name, merge=not args.dry_run)
    cfg = hybrid_config(args.model or ("tiny-hybrid" if args.dry_run else "nemotron-3-nano-4b"))
    model = HybridDecoder(cfg, dtype=torch.bfloat16, device="cuda" if gpu else "cpu")
    records, rows = [], []
    for batch in tqdm(args.batch_size, desc="batch sizes"):
        res = compare_paths(model, batch, args.warmup_steps, args.num_steps,
                            max_len=4 + args.warmup_steps + args.num_steps + 4, buffer_len=args.buffer_len,
                            state_dtype=DTYPES[args.state_dtype], route=args.route, staggered=args.staggered)
        std, rep = res["standard_ms"], res["replay_ms"]
        shares = step_shares(model, batch, args.num_steps, max_len=4 + 2 + args.num_steps + 4,
                             buffer_len=args.buffer_len, state_dtype=DTYPES[args.state_dtype])
        for route, ms in (("standard", std), (args.route, rep)):
            records.append(dict(gpu=gpu_name, model=cfg.name,
                                batch=batch, T=0, acceptance=None, state_dtype=args.state_dtype, L=args.buffer_len,
                                route=route, ms_per_step=round(ms, 4), tokens_per_s=round(batch / ms * 1e3, 1),
                                baseline_tokens_per_s=round(batch / std * 1e3, 1), speedup=round(std / ms, 3),
                                logits_rel_err=round(res["logits_rel_err"], 6), commit=git_commit(),
                                **({"phases": "staggered"} if args.staggered and route != "standard" else {}),
                                **(shares if route == "standard" else {})))
        rows.append([cfg.name, batch, f"{std:.3f}", f"{rep:.3f}", f"{batch / rep * 1e3:.0f}", f"{std / rep:.2f}x",
                     " / ".join(f"{shares[k + '_share']:.0%}" for k in ("ssm", "attention", "mlp")),
                     f"{res['logits_rel_err']:.1e}"])
    results.write(records)
    print(tabulate(rows, headers=["model", "batch", "standard ms/step", "ReplaySSM ms/step", "ReplaySSM tok/s",
                                  "speedup", "standard step: SSM / attention / MLP", "logits rel. err (teacher-forced)"]))


if __name__ == "__main__":
    main()
