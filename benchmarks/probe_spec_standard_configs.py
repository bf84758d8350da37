#!/usr/bin/env python3
"""The standard speculative step (verify writing T intermediate states, then the promote
copy) under each launch config of its verify kernel, against the kernel's default.

The speculative speedups are measured against this step, so its verify kernel must run on
its best config, not a default. Bytes a layer-step: the state read, T states written, and
the promote's read and write of one, ``(T + 3) x`` the state.

    python benchmarks/probe_spec_standard_configs.py   # -> benchmarks/results/spec_standard_configs.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.benchmarking.timing import copy_bandwidth_gbps
from trtllm_replayssm.models import GDNGeometry, model
from trtllm_replayssm.ops.gdn.spec_standard import gdn_spec_standard
from trtllm_replayssm.ops.mamba2.spec_standard import selective_state_update_spec_standard

BLOCKS = [4, 8, 16, 32]
WARPS = [1, 2, 4, 8]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-4b", "qwen3.5-122b", "nemotron-3-nano-4b",
                                                    "nemotron-3-super"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 256, 512])
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/spec_standard_configs.json"))
    args = ap.parse_args()
    copy = copy_bandwidth_gbps()
    records = []
    for name in args.models:
        geom = model(name).geom
        gdn = isinstance(geom, GDNGeometry)
        for batch in args.batches:
            case = SpecCase(name, geom, batch, args.tokens, 16, args.tokens)
            rig = make_spec_rig(case)
            moved = (args.tokens + 3) * case.state_bytes
            for block in BLOCKS:
                for warps in WARPS:
                    def layer(i, block=block, warps=warps, rig=rig):
                        if gdn:
                            gdn_spec_standard(rig.state[i], **rig.step, intermediate_states=rig.inter[i],
                                              block_v=block, num_warps=warps)
                        else:
                            selective_state_update_spec_standard(rig.state[i], **rig.step,
                                                                 intermediate_states=rig.inter[i], block_p=block,
                                                                 num_warps=warps)
                    rig.standard_layer = layer
                    us = rig.time_us(rig.standard_fn(args.steps), args.steps)
                    records.append(dict(gpu=torch.cuda.get_device_name(), model=name, batch=batch, T=args.tokens,
                                        block=block, num_warps=warps, default=(block, warps) == (16, 4),
                                        us_per_step=round(us, 1), gbps=round(moved / us / 1e3, 1),
                                        copy_gbps=round(copy, 1), commit=git_commit()))
                    print(records[-1], flush=True)
            Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
            del rig
            torch.cuda.empty_cache()
    best = {}
    for r in records:
        k = (r["model"], r["batch"])
        if k not in best or r["us_per_step"] < best[k]["us_per_step"]:
            best[k] = r
    rows = [[m, b, r["block"], r["num_warps"], r["us_per_step"],
             next(x["us_per_step"] for x in records if (x["model"], x["batch"]) == (m, b) and x["default"]),
             f"{r['gbps'] / r['copy_gbps']:.0%}"] for (m, b), r in best.items()]
    print(tabulate(rows, headers=["model", "batch", "best block", "warps", "us", "default (16, 4) us", "of copy"]))


if __name__ == "__main__":
    main()
