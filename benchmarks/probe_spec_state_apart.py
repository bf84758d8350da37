#!/usr/bin/env python3
"""Mamba2 speculative verify: where a step's time goes, with the state's product fused
into the verify (``split_fold`` 1) or in a lean launch of its own (``split_fold`` 3).

Per verify launch config, on the speculative rig of ``bench_spec.py`` (CUDA graphs, cold
L2, median; T = 4, history 16, all drafts accepted): a whole run of steps (rows flushing
together every 5th step), a non-flush step alone (cursors held at 4 committed entries),
a flush step alone (every row folding 16 entries), and for split_fold 3 the launch of the
ring's part alone (the state's product launch skipped). Then the state's product launch
alone per tile (rows of headdim, dstate columns a loop step, warps, pipeline stages),
against the time to read the checkpoint at copy bandwidth.

    python benchmarks/probe_spec_state_apart.py    # H200 -> benchmarks/results/spec_state_apart.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.mamba2.spec as m2_spec
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.benchmarking.timing import capture, copy_bandwidth_gbps, time_graph_ms
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

CONFIGS = [LaunchConfig(16, 1, heads_per_prog=16, split_fold=1)] + [
    LaunchConfig(b, w, heads_per_prog=h, split_fold=3)
    for b, w, h in [(16, 1, 16), (32, 1, 16), (32, 2, 8), (64, 1, 16), (64, 1, 8), (64, 2, 16)]]
# (rows, columns, warps, stages) of the state's product launch
STATE_TILES = [(16, 64, 1, 3), (32, 32, 1, 3), (32, 64, 1, 2), (64, 32, 2, 3), (64, 64, 2, 2), (128, 32, 4, 3),
               (32, 128, 1, 1), (64, 128, 4, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/spec_state_apart.json"))
    args = ap.parse_args()
    gpu, commit, copy_gbps = torch.cuda.get_device_name(), git_commit(), copy_bandwidth_gbps()
    real_launch = m2_spec.launch_kernel
    records = []
    for batch in args.batches:
        rig = make_spec_rig(SpecCase(args.model, model(args.model).geom, batch, 4, 16, 4))
        layers = rig.n_layers

        def us(fn, steps=4):
            return round(time_graph_ms(capture(fn), args.replays) * 1e3 / (steps * layers), 1)

        def held_step():  # the same verify step 4 times a layer (the cursors are not committed)
            for i in range(layers):
                for _ in range(4):
                    rig.replay_layer(i)

        base = dict(gpu=gpu, model=args.model, batch=batch, T=4, B=16, copy_gbps=round(copy_gbps, 1), commit=commit,
                    read_state_at_copy_bw_us=round(rig.case.state_bytes / copy_gbps / 1e3, 1))
        for cfg in CONFIGS:
            rig.config = cfg
            rec = dict(base, probe="verify", config=cfg.to_dict(), run_us=us(rig.replay_fn(20), 20))
            rig.wp.fill_(4)
            rig.flush.zero_()
            rec["nonflush_step_us"] = us(held_step)
            if cfg.split_fold == m2_spec.STATE_APART:
                m2_spec.launch_kernel = lambda k, *a, **kw: (None if k is m2_spec._spec_state_product_kernel
                                                             else real_launch(k, *a, **kw))
                rec["ring_part_us"] = us(held_step)
                m2_spec.launch_kernel = real_launch
            rig.wp.fill_(16)
            rig.flush.fill_(1)
            rec["flush_step_us"] = us(held_step)
            records.append(rec)
            print(rec, flush=True)
        # The state's product launch alone: the verify's other launches skipped.
        rig.config = LaunchConfig(64, 1, heads_per_prog=16, split_fold=3)
        rig.wp.fill_(4)
        rig.flush.zero_()
        m2_spec.launch_kernel = lambda k, *a, **kw: (real_launch(k, *a, **kw) if k is m2_spec._spec_state_product_kernel
                                                     else None)
        saved = (m2_spec.STATE_PRODUCT_ROWS, m2_spec.STATE_PRODUCT_COLS, m2_spec.STATE_PRODUCT_WARPS,
                 m2_spec.STATE_PRODUCT_STAGES)
        for tile in STATE_TILES:
            (m2_spec.STATE_PRODUCT_ROWS, m2_spec.STATE_PRODUCT_COLS, m2_spec.STATE_PRODUCT_WARPS,
             m2_spec.STATE_PRODUCT_STAGES) = tile
            rec = dict(base, probe="state_product", tile=dict(zip(("rows", "cols", "warps", "stages"), tile)),
                       us=us(held_step))
            records.append(rec)
            print(rec, flush=True)
        (m2_spec.STATE_PRODUCT_ROWS, m2_spec.STATE_PRODUCT_COLS, m2_spec.STATE_PRODUCT_WARPS,
         m2_spec.STATE_PRODUCT_STAGES) = saved
        m2_spec.launch_kernel = real_launch
        rig = None  # (frees the layers before the next batch)
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([[r["batch"], *(r["config"][k] for k in ("block_p", "num_warps", "heads_per_prog", "split_fold")),
                     r["run_us"], r["nonflush_step_us"], r.get("ring_part_us", ""), r["flush_step_us"]]
                    for r in records if r["probe"] == "verify"],
                   headers=["batch", "rows", "warps", "heads", "split_fold", "run us/step", "non-flush", "ring part",
                            "flush"]))
    print(tabulate([[r["batch"], *r["tile"].values(), r["us"], r["read_state_at_copy_bw_us"]]
                    for r in records if r["probe"] == "state_product"],
                   headers=["batch", "rows", "cols", "warps", "stages", "state product us", "state read at copy BW"]))


if __name__ == "__main__":
    main()
