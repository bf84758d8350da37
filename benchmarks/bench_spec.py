#!/usr/bin/env python3
"""Speculative decode benchmark (Mamba2 and GDN): replay verify + commit vs the standard spec step
(T intermediate states + promote), and replay cost per accepted token vs standard
autoregressive decode. Method: CUDA graphs, cold L2, median; a run of ``--steps`` verify
steps with a fixed acceptance (flushes included, cursors reset at its start, so every row
flushes at the same steps), and the same run with the rows spread over their flush period
(``SpecRig.staggered_start``: a server's steady state; ``staggered_speedup``).

    python benchmarks/bench_spec.py                     # H200 -> benchmarks/results/spec.json
    python benchmarks/bench_spec.py --dry-run --models tiny --batches 2 --tokens 2 --history-len 2 \\
        --steps 3 --out /tmp/spec.json   # CPU: the flow only

The verify runs on the op's default launch config at each batch (``default_verify_config``:
what a caller gets), or on one tuned at ``--tune-batch`` and kept for every batch. The
replay, standard and autoregressive runs take turns over ``--rounds`` rounds, a capture
each, and each reports its median (``benchmarking.rig.median_of_rounds``; the committed
``spec.json`` at 64d14a3 predates the rounds: one capture each).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.spec import SpecCase, default_verify_config, make_spec_rig, tune_verify_config
from trtllm_replayssm.benchmarking.records import DRY_RUN_DIR, RESULTS, ResultsFile, committed_or_scratch, git_commit
from trtllm_replayssm.benchmarking.rig import median_of_rounds
from trtllm_replayssm.benchmarking.timing import copy_bandwidth_gbps
from trtllm_replayssm.models import model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[32, 128, 256, 512])
    ap.add_argument("--tokens", nargs="+", type=int, default=[4, 6], help="T = 1 + drafts")
    ap.add_argument("--history-len", type=int, default=16)
    ap.add_argument("--acceptance", nargs="+", default=["all", "3"],
                    help="tokens accepted per step (bonus included); 'all' = T")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the side-by-side timing (a capture each)")
    ap.add_argument("--tune-batch", type=int, default=None,
                    help="tune the verify kernel's launch config at this batch (all drafts accepted) per model and T, "
                         "then keep it for every case (default: the op's default config at each batch)")
    ap.add_argument("--max-candidates", type=int, default=None, help="tune over the first N launch configs")
    ap.add_argument("--out", default=None, help=f"default: {RESULTS.name}/spec.json (a dry run's: under {DRY_RUN_DIR})")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run the flow eagerly, nothing measured")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "spec.json", args.dry_run)
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (dry run)"
    results = ResultsFile(args.out, gpu, merge=not args.dry_run)
    commit, copy_gbps = git_commit(), copy_bandwidth_gbps()
    records, rows = [], []
    for name in args.models:
        for T in args.tokens:
            tuned = None
            if args.tune_batch:
                tuned = tune_verify_config(SpecCase(name, model(name).geom, args.tune_batch, T, args.history_len, T),
                                           args.steps, args.replays, args.max_candidates)
                print(tabulate([{k: v for k, v in t.items() if k in ("block_p", "num_warps", "split_fold",
                                                                      "heads_per_prog", "us", "error")}
                                for t in tuned["tried"]], headers="keys"))
                print(name, "T =", T, "verify config:", tuned["config"], flush=True)
            for acc in args.acceptance:
                c = T if acc == "all" else min(int(acc), T)
                for batch in args.batches:
                    case = SpecCase(name, model(name).geom, batch, T, args.history_len, c)
                    rig = make_spec_rig(case)
                    rig.config = tuned["config"] if tuned else None
                    config = rig.config or default_verify_config(case.geom, batch)
                    runs = {"rep": rig.replay_fn(args.steps), "std": rig.standard_fn(args.steps),
                            "ar": rig.ar_fn(args.steps), "rep_staggered": rig.replay_fn(args.steps, staggered=True)}
                    us_all = median_of_rounds({k: partial(rig.time_us, fn, args.steps, args.replays)
                                               for k, fn in runs.items()}, args.rounds)
                    rep, std, ar = us_all["rep"], us_all["std"], us_all["ar"]
                    base = dict(gpu=gpu, model=name, state_dtype="fp32", act_dtype="bf16", batch=batch,
                                L=args.history_len + T, T=T, B=args.history_len, acceptance=c,
                                baseline_us_per_step=round(std, 3), copy_gbps=round(copy_gbps, 1), commit=commit,
                                ar_standard_us_per_token=round(ar, 3), config=config.to_dict())
                    for route, us in (("replay_spec", rep), ("standard_spec", std)):
                        records.append(dict(base, route=route, us_per_step=round(us, 3), speedup=round(std / us, 3),
                                            us_per_token=round(us / c, 3), cost_vs_ar=round(us / c / ar, 3),
                                            achieved_gbps=round(case.state_bytes * (1 if route == "replay_spec"
                                                                                    else 1 + T) / (us * 1e-6) / 1e9, 1)))
                    staggered = us_all["rep_staggered"]  # the rows spread over their flush period
                    records[-2].update(staggered_us_per_step=round(staggered, 3),
                                       staggered_speedup=round(std / staggered, 3))
                    rows.append([name, T, c, batch, f"{std:.1f}", f"{rep:.1f}", f"{std / rep:.2f}x",
                                 f"{rep / c / ar:.2f}", f"{std / staggered:.2f}x"])
                    print(rows[-1], flush=True)
                    results.write(records)
                    del rig
                    torch.cuda.empty_cache()
    print(tabulate(rows, headers=["model", "T", "accepted", "batch", "standard spec us", "replay spec us", "speedup",
                                  "replay cost / token vs AR standard", "speedup, staggered"]))


if __name__ == "__main__":
    main()
