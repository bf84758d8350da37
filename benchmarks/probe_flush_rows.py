#!/usr/bin/env python3
"""Mamba2 speculative verify: batch rows a program of the flush rows' launch looks through.

Times one verify + commit step per verify launch config and per ``FLUSH_ROW_BLOCK`` (1: a
program a row, the launch's programs each load their row's cursors and most return), all
drafts accepted, on the speculative rig of ``bench_spec.py`` (CUDA graphs, cold L2,
median; the rows flush together every 7th step at T = 4, history 16).

    python benchmarks/probe_flush_rows.py      # H200 -> benchmarks/results/spec_flush_rows.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.mamba2.spec as m2_spec
from trtllm_replayssm.benchmarking.records import REPO
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig, probe_record
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

CONFIGS = [LaunchConfig(32, 2, heads_per_prog=16, split_fold=1), LaunchConfig(16, 1, heads_per_prog=16, split_fold=1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--row-blocks", nargs="+", type=int, default=[1, 8, 16, 32])
    ap.add_argument("--tokens", type=int, default=4, help="T = 1 + drafts")
    ap.add_argument("--history-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/spec_flush_rows.json"))
    args = ap.parse_args()
    m2_spec.FLUSH_MIN_PROGRAMS = 0  # the block as given, whatever the grid
    records = []
    for batch in args.batches:
        rig = make_spec_rig(SpecCase(args.model, model(args.model).geom, batch, args.tokens, args.history_len,
                                     args.tokens))
        for cfg in CONFIGS:
            for rows in args.row_blocks:
                m2_spec.FLUSH_ROW_BLOCK = rows
                records.append(probe_record(rig, cfg, args.steps, args.replays, row_block=rows))
        del rig
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([{k: r[k] for k in ("batch", "row_block", "us_per_step")} | {"config": str(tuple(
        r["config"][k] for k in ("block_p", "num_warps", "heads_per_prog")))} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
