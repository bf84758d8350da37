#!/usr/bin/env python3
"""Do the kernels lose speed on an engine's paged pools? TensorRT-LLM main keeps a slot's
state, conv state and ReplaySSM rings of a layer together in one page (KV cache manager
V2), so the state and ring views have a slot stride larger than a slot's block. This
times, side by side on the same geometry and batch, each kernel on packed pools and on
gapped ones (a gap that keeps the slot stride a multiple of 16 elements, and one that
does not, which costs Triton its divisibility specialisation):

  replay_nonflush   ReplaySSM step, every row appending (output_only route)
  replay_flush      ReplaySSM step, every row folding its full ring (output_only route)
  standard          the in-tree standard step (read + update + write)

Method: one CUDA graph per case, median of replays; one layer whose states are far larger
than the L2 (batch >= 64 at these shapes).

    python benchmarks/bench_gapped_pools.py            # H200 -> benchmarks/results/gapped_pools.json
    python benchmarks/bench_gapped_pools.py --dry-run --models tiny tiny-gdn --batches 2 --out /tmp/g.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch
from tabulate import tabulate

from trtllm_replayssm.benchmarking.records import DRY_RUN_DIR, RESULTS, committed_or_scratch, git_commit
from trtllm_replayssm.benchmarking.timing import capture, time_graph_ms
from trtllm_replayssm.cache import gdn_ring_layout, mamba2_ring_layout
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from trtllm_replayssm.ops.mamba2 import selective_state_update, selective_state_update_replayssm

LAYOUTS = {"packed": 0, "gap_16": 48, "gap_odd": 40}  # extra elements between two slots' blocks


def gapped(shape, dtype, gap: int, device) -> torch.Tensor:
    """Zeros ``(slots, *block)`` at a slot stride of ``block + gap`` elements."""
    block = math.prod(shape[1:])
    return torch.zeros(shape[0], block + gap, dtype=dtype, device=device)[:, :block].view(*shape)


def mamba2_steps(geom, batch: int, L: int, gap: int, device):
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    state = gapped((batch, H, P, N), torch.float32, gap, device)
    rings = {name: gapped((batch, *block), dtype, gap, device)
             for name, (block, dtype) in mamba2_ring_layout(geom, L, torch.bfloat16).items()}
    write_pos = torch.zeros(batch, dtype=torch.int32, device=device)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(batch, H, P, generator=g, device=device).to(torch.bfloat16)
    dt = torch.randn(batch, H, generator=g, device=device).to(torch.bfloat16)
    B, C = (torch.randn(batch, G, N, generator=g, device=device).to(torch.bfloat16) for _ in range(2))
    A, D, dt_bias = -torch.rand(H, device=device) - 0.5, torch.randn(H, device=device), torch.randn(H, device=device)
    args = (x, dt, A, B, C)
    kw = dict(D=D, dt_bias=dt_bias, dt_softplus=True)
    replay = lambda: selective_state_update_replayssm(state, *args, **kw, **rings, write_pos=write_pos,  # noqa: E731
                                                      route="output_only")
    return {"replay_nonflush": (lambda: write_pos.fill_(L // 2), replay),
            "replay_flush": (lambda: write_pos.fill_(L - 1), replay),
            "standard": (lambda: None, lambda: selective_state_update(state, *args, **kw))}


def gdn_steps(geom, batch: int, L: int, gap: int, device):
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    state = gapped((batch, HV, V, K), torch.float32, gap, device)
    rings = {name: gapped((batch, *block), dtype, gap, device) for name, (block, dtype) in gdn_ring_layout(geom, L, torch.float32).items()}
    write_pos = torch.zeros(batch, dtype=torch.int32, device=device)
    g = torch.Generator(device=device).manual_seed(1)
    q, k = (torch.randn(batch, H, K, generator=g, device=device).to(torch.bfloat16) for _ in range(2))
    v = torch.randn(batch, HV, V, generator=g, device=device).to(torch.bfloat16)
    a, b = (torch.randn(batch, HV, generator=g, device=device).to(torch.bfloat16) for _ in range(2))
    args = (q, k, v, a, b, torch.zeros(HV, device=device), torch.zeros(HV, device=device))
    replay = lambda: fused_recurrent_gated_delta_rule_replayssm(state, *args, **rings, write_pos=write_pos,  # noqa: E731
                                                                route="output_only")
    return {"replay_nonflush": (lambda: write_pos.fill_(L // 2), replay),
            "replay_flush": (lambda: write_pos.fill_(L - 1), replay),
            "standard": (lambda: None, lambda: fused_sigmoid_gating_delta_rule_update(state, *args))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-nano-4b", "nemotron-3-super", "qwen3.5-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run the flow on the interpreter")
    ap.add_argument("--out", default=None,
                    help=f"default: {RESULTS.name}/gapped_pools.json (a dry run's: under {DRY_RUN_DIR})")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "gapped_pools.json", args.dry_run)
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("needs a CUDA GPU (or --dry-run)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    records = []
    for name in args.models:
        m = model(name)
        for batch in args.batches:
            for layout, gap in LAYOUTS.items():
                make = gdn_steps if m.family == "gdn" else mamba2_steps
                for kernel, (prepare, step) in make(m.geom, batch, args.buffer_len, gap, device).items():
                    prepare()
                    ms = time_graph_ms(capture(step), replays=args.replays)
                    records.append(dict(model=name, batch=batch, layout=layout, gap=gap, kernel=kernel, ms=ms))
    for r in records:  # time relative to the packed pool's, same model, batch and kernel
        base = next(p["ms"] for p in records if p["layout"] == "packed"
                    and all(p[k] == r[k] for k in ("model", "batch", "kernel")))
        r["vs_packed"] = r["ms"] / base
    print(tabulate([[r["model"], r["batch"], r["kernel"], r["layout"], f"{r['ms'] * 1e3:.1f}", f"{r['vs_packed']:.3f}"]
                    for r in records], headers=["model", "batch", "kernel", "layout", "us", "vs packed"]))
    out = dict(command=" ".join(sys.argv), commit=git_commit(),
               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (dry run)",
               buffer_len=args.buffer_len, records=records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
