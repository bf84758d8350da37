#!/usr/bin/env python3
"""GDN ring halves: can the ``d`` ring or the ``k`` ring alone go to bf16 beside an fp32 state?

``gdn_drift.py`` rounds both halves of the ring together (the kernels take one
``ring_dtype``): with an fp32 state the bf16 ring is 1844x the standard kernel's drift (H200).
This probe splits the question, in plain PyTorch on the CPU (no kernel: the replay step of
``replayssm.md`` section 2 emulated in fp32, the state rebuilt from the checkpoint entry by
entry rather than in the kernels' closed form), with a start and inputs drawn as in
``gdn_drift.py`` (the models' gate ranges, bf16 activations), and reports each checkpoint's
relative error against an fp64 recurrence after ``--steps`` steps, next to the standard
fp32 step's:

- ``d`` fp32, ``k`` fp32: the package's ring beside an fp32 state;
- ``d`` fp32, ``k`` bf16 (the normalised key rounded), and ``d`` bf16, ``k`` fp32;
- ``d`` fp32, raw ``k``: the key as the step receives it (bf16 activations, 2 bytes an
  element), normalised again on every replay. The normalisation is a function of those
  bf16 values, so the rebuilt key is the stored fp32 one bit for bit: half the ``k`` ring's
  bytes at no drift.

    python benchmarks/probe_gdn_ring_halves.py     # CPU, ~20 s: 8 value heads, K = V = 128, 4096 steps
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Dict, List, Tuple

import torch
from tabulate import tabulate

from trtllm_replayssm.ops.gdn.naive import gdn_gates, gdn_step_ref, l2norm, model_gate_params

RESULTS = Path(__file__).resolve().parent / "results"
# name -> (d ring dtype, k ring dtype; None: the raw bf16 key, normalised on replay)
RINGS = {"d fp32, k fp32": (torch.float32, torch.float32), "d fp32, k bf16": (torch.float32, torch.bfloat16),
         "d bf16, k fp32": (torch.bfloat16, torch.float32), "d fp32, raw k (bf16)": (torch.float32, None)}


class EmulatedReplay:
    """One slot's fp32 checkpoint and its ring of ``(d, k, g)`` for ``HV`` heads (one key
    head a value head), stepped as the replay kernel steps: rebuild the state from the
    checkpoint and the ring, append ``d`` (or fold and store on the ring's last step)."""

    def __init__(self, start: torch.Tensor, buffer_len: int, d_dtype: torch.dtype, k_dtype):
        self.checkpoint, self.L, self.d_dtype, self.k_dtype = start.clone(), buffer_len, d_dtype, k_dtype
        self.ring: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def key(self, stored: torch.Tensor) -> torch.Tensor:
        return l2norm(stored.float()) if self.k_dtype is None else stored.float()

    def step(self, q: torch.Tensor, k_raw: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor):
        """``q (HV, K)`` normalised and scaled, ``k_raw (HV, K)`` bf16, ``v (HV, V)``,
        ``g, beta (HV,)``; returns ``o (HV, V)``."""
        S = self.checkpoint
        for d_j, k_j, g_j in self.ring:
            S = torch.exp(g_j)[:, None, None] * S + d_j.float()[:, :, None] * self.key(k_j)[:, None, :]
        k = l2norm(k_raw.float())
        decayed = torch.exp(g)[:, None, None] * S
        d = beta[:, None] * (v - torch.einsum("hvk,hk->hv", decayed, k))
        new_state = decayed + d[:, :, None] * k[:, None, :]
        if len(self.ring) == self.L - 1:  # the flush: the ring folds into the stored checkpoint
            self.checkpoint, self.ring = new_state, []
        else:
            self.ring.append((d.to(self.d_dtype), k_raw if self.k_dtype is None else k.to(self.k_dtype), g))
        return torch.einsum("hvk,hk->hv", new_state, q)


def run(heads: int, dim: int, steps: int, buffer_len: int, seed: int = 0) -> Dict[str, dict]:
    """The checkpoints' relative errors against fp64 after ``steps`` steps (a multiple of
    ``buffer_len``, so that every replay checkpoint has just been flushed)."""
    if steps % buffer_len:
        raise ValueError(f"steps ({steps}) must be a multiple of buffer_len ({buffer_len})")
    g = torch.Generator().manual_seed(seed)
    A_log, dt_bias = model_gate_params(heads, g)
    start = torch.randn(1, heads, dim, dim, generator=g) * 0.1
    ref, standard = start.double(), start.clone()
    replays = {name: EmulatedReplay(start[0], buffer_len, *dtypes) for name, dtypes in RINGS.items()}
    for _ in range(steps):
        inp = dict(q=torch.randn(1, heads, dim, generator=g), k=torch.randn(1, heads, dim, generator=g),
                   v=torch.randn(1, heads, dim, generator=g), a=torch.randn(1, heads, generator=g) * 0.5,
                   b=torch.randn(1, heads, generator=g))
        inp = {n: t.to(torch.bfloat16) for n, t in inp.items()}
        ref, _ = gdn_step_ref(ref, **inp, A_log=A_log, dt_bias=dt_bias)
        standard, _ = gdn_step_ref(standard, **inp, A_log=A_log, dt_bias=dt_bias)
        q = l2norm(inp["q"][0].float()) * dim ** -0.5
        gate, beta = gdn_gates(inp["a"][0].float(), inp["b"][0].float(), A_log, dt_bias)
        for r in replays.values():
            r.step(q, inp["k"][0], inp["v"][0].float(), gate, beta)

    def err(s: torch.Tensor) -> float:
        return ((s.double() - ref[0]).norm() / ref[0].norm()).item()

    std_err = err(standard[0])
    out = {"standard (fp32 state every step)": dict(rel_err=std_err, ratio=1.0, state=standard[0])}
    for name, r in replays.items():
        out[f"replay, {name}"] = dict(rel_err=err(r.checkpoint), ratio=err(r.checkpoint) / std_err, state=r.checkpoint)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=8, help="value heads (one key head each)")
    ap.add_argument("--dim", type=int, default=128, help="K = V (Qwen3.5: 128)")
    ap.add_argument("--steps", type=int, default=4096)
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--out", type=Path, default=RESULTS / "gdn_ring_halves_cpu.json")
    args = ap.parse_args()
    results = run(args.heads, args.dim, args.steps, args.buffer_len)
    records = [dict(kernel=name, rel_err=r["rel_err"], ratio=r["ratio"]) for name, r in results.items()]
    print(tabulate([[r["kernel"], f"{r['rel_err']:.3e}", f"{r['ratio']:.2f}x"] for r in records],
                   headers=[f"fp32 state after {args.steps} steps (L = {args.buffer_len})", "rel. error vs fp64",
                            "vs standard"]))
    raw_exact = torch.equal(results["replay, d fp32, raw k (bf16)"]["state"], results["replay, d fp32, k fp32"]["state"])
    print(f"raw-key ring's checkpoint bit-identical to the fp32 ring's: {raw_exact}")
    meta = dict(heads=args.heads, K=args.dim, V=args.dim, steps=args.steps, L=args.buffer_len, device="cpu",
                emulated="plain PyTorch fp32 replay step (replayssm.md section 2), no kernel")
    args.out.write_text(json.dumps(dict(meta=meta, records=records, raw_key_bit_identical=raw_exact), indent=1) + "\n")


if __name__ == "__main__":
    main()
