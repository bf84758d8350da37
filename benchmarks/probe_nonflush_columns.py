#!/usr/bin/env python3
"""The Mamba2 non-flush launch with the checkpoint read in column chunks, on whole cycles.

The tuned non-flush launch (32 rows on one warp) takes a row's ``S_0 C`` over the 16-32
threads that hold the row (shuffles); with ``key_chunk`` columns a step it reads the
checkpoint a chunk at a time and each row's sum stays in a thread's registers. This times
the output_only route with the table's configs, its non-flush launch's ``key_chunk`` set
to each value (0: whole rows, the table's), the cycle and its flush and non-flush steps
apart (same method as ``bench_mamba2_ar.py``).

    python benchmarks/probe_nonflush_columns.py   # -> benchmarks/results/mamba2_nonflush_columns.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm._runtime import device_arch
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.benchmarking.rigs import make_model_rig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--state-dtypes", nargs="+", default=["bf16", "fp32"], choices=list(DTYPES))
    ap.add_argument("--key-chunks", nargs="+", type=int, default=[0, 4, 8, 16, 32])
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_nonflush_columns.json"))
    args = ap.parse_args()
    records = []
    for sd in args.state_dtypes:
        for name in args.models:
            for batch in args.batches:
                rig = make_model_rig(name, batch, 16, DTYPES[sd])
                table = rig.table_configs(device_arch(rig.cache.write_pos.device))
                nonflush, fold = table["output_only"]["config"], table["fold"]["config"]
                std = rig.time_cycle_us(Launch("standard"))
                for chunk in args.key_chunks:
                    cfg = replace(nonflush, key_chunk=chunk)
                    us, flush, nf = time_cycle_and_steps(rig, Launch("output_only", cfg, fold))
                    records.append(dict(gpu=torch.cuda.get_device_name(), model=name, state_dtype=sd, batch=batch,
                                        L=16, config=cfg.to_dict(), key_chunk=chunk, us_per_step=round(us, 2),
                                        standard_us_per_step=round(std, 2), speedup=round(std / us, 3),
                                        flush_us=round(flush, 1), nonflush_us=round(nf, 1), commit=git_commit()))
                    print({k: v for k, v in records[-1].items() if k not in ("config", "gpu")}, flush=True)
                    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
                del rig
                torch.cuda.empty_cache()
    print(tabulate([{k: v for k, v in r.items() if k not in ("config", "gpu", "commit")} for r in records],
                   headers="keys"))


if __name__ == "__main__":
    main()
