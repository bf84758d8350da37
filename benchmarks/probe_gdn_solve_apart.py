#!/usr/bin/env python3
"""GDN speculative verify: the drafts' solve (``Z`` a row and value head) formed in every
verify program's loop over heads, or in a launch of its own ahead of the verify
(``ops/gdn/spec.py: SOLVE_APART``), per verify launch config.

Times a run of verify + commit steps on the speculative rig of ``bench_spec.py`` (CUDA
graphs, cold L2, median; T = 4, history 16, all drafts accepted, the rows flushing
together every 5th step), both settings side by side in one process.

    python benchmarks/probe_gdn_solve_apart.py    # H200 -> benchmarks/results/gdn_solve_apart.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.gdn.spec as gdn_spec
from trtllm_replayssm.benchmarking.records import REPO
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig, probe_record
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

CONFIGS = [LaunchConfig(b, w, heads_per_prog=h, split_fold=s, key_chunk=32)
           for b, w, h, s in [(128, 4, 4, 2), (128, 4, 2, 2), (128, 4, 1, 2), (128, 4, 4, 1), (64, 2, 4, 2)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3.5-122b")
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--tokens", type=int, default=4, help="T = 1 + drafts")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_solve_apart.json"))
    args = ap.parse_args()
    records = []
    for batch in args.batches:
        rig = make_spec_rig(SpecCase(args.model, model(args.model).geom, batch, args.tokens, 16, args.tokens))
        for cfg in CONFIGS:
            for apart in (False, True):
                gdn_spec.SOLVE_APART = apart
                records.append(probe_record(rig, cfg, args.steps, args.replays, solve_apart=apart))
        rig = None  # (frees the layers before the next batch)
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([[r["batch"], *(r["config"][k] for k in ("block_p", "num_warps", "heads_per_prog", "split_fold")),
                     r["solve_apart"], r["us_per_step"]] for r in records],
                   headers=["batch", "rows", "warps", "heads", "split_fold", "solve apart", "us / verify step"]))


if __name__ == "__main__":
    main()
