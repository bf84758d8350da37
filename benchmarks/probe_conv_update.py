#!/usr/bin/env python3
"""The rig's in-place causal conv update (autoregressive decode) in its two forms: the
tile form (a channel's kept inputs as a row of a [channels, K] tile, read and written two
bytes at a time: they lie 2(K - 1) bytes apart) and the flat form (``FLAT_CONV_UPDATE``:
the row's kept inputs moved as one flat array, whole-vector stores). Times one layer's
update over enough distinct conv states for a cold L2 (CUDA graph, median) and reports
the bytes' bandwidth against copy bandwidth measured in the same run.

    python benchmarks/probe_conv_update.py      # -> benchmarks/results/conv_update_forms.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.timing import capture, copy_bandwidth_gbps, layers_for_cold_l2, time_graph_ms
from trtllm_replayssm.e2e import kernels
from trtllm_replayssm.models import GDNGeometry, model



def conv_channels(name: str) -> int:
    """The mixer's conv channels, as the rig sizes them (``e2e/model.py``: d_conv)."""
    g = model(name).geom
    if isinstance(g, GDNGeometry):
        return 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
    return g.nheads * g.headdim + 2 * g.ngroups * g.dstate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/conv_update_forms.json"))
    args = ap.parse_args()
    copy_gbps, records = copy_bandwidth_gbps(), []
    for name in ("nemotron-3-nano-4b", "qwen3.5-4b"):
        C = conv_channels(name)
        for batch in args.batches:
            K, dt = 4, torch.bfloat16
            bytes_moved = batch * C * (2 * (K - 1) + 2) * 2  # state read + write, x read, out write
            n = layers_for_cold_l2(bytes_moved)
            convs = [torch.randn(batch, C, K - 1, device="cuda", dtype=dt) for _ in range(n)]
            xs = [torch.randn(batch, 1, C, device="cuda", dtype=dt) for _ in range(n)]
            w, b = torch.randn(C, K, device="cuda", dtype=dt), torch.randn(C, device="cuda", dtype=dt)
            for flat in (False, True):
                kernels.FLAT_CONV_UPDATE = flat

                def run():
                    for conv, x in zip(convs, xs):
                        kernels.causal_conv_update(conv, x, w, b)
                us = time_graph_ms(capture(run)) * 1e3 / n
                kernels.FLAT_CONV_UPDATE = False
                records.append(dict(gpu=torch.cuda.get_device_name(), model=name, channels=C, batch=batch,
                                    form="flat" if flat else "tile", us=round(us, 2),
                                    gbps=round(bytes_moved / (us * 1e-6) / 1e9, 1),
                                    share_of_copy=round(bytes_moved / (us * 1e-6) / 1e9 / copy_gbps, 3),
                                    commit=git_commit()))
                print(records[-1], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([{k: v for k, v in r.items() if k not in ("gpu", "commit")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
