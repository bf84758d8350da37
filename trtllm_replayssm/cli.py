"""``trtllm-replayssm``: the command-line entry point.

    trtllm-replayssm e2e                         # a whole hybrid model decoding both ways
    trtllm-replayssm e2e --model tiny-hybrid-gdn
    trtllm-replayssm decode                      # kernel level: standard vs ReplaySSM, Mamba2 geometry
    trtllm-replayssm decode --model tiny-gdn     # the same for Gated DeltaNet

On a machine without a CUDA device the kernels run in Triton's interpreter on a tiny
geometry; on a GPU the default is Nemotron-3-Super's SSM layer and the run also times
both kernels (whole cycles, CUDA graphs, cold L2).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import torch
from tabulate import tabulate
from tqdm import tqdm

from . import _runtime
from ._validation import positive_int
from .cache import GDNReplayCache, Mamba2ReplayCache
from .models import MODELS, TINY_MAMBA2, model
from .ops.gdn import ROUTES as GDN_ROUTES
from .ops.gdn import choose_gdn_route, fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from .ops.cursors import FLUSH_EVERY_STEP
from .ops.mamba2 import ROUTES, choose_route, selective_state_update, selective_state_update_replayssm

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


class _Mamba2Pair:
    """Standard and replay Mamba2 kernels on the same start, layer by layer."""

    def __init__(self, m, layers, batch, L, sd, ad, dev):
        g = self.g = m.geom
        self.batch, self.ad, self.dev = batch, ad, dev
        self.cache = Mamba2ReplayCache(g, layers, batch, L, sd, ad, dev)
        self.cache.ssm_state.normal_()
        self.standard_state = self.cache.ssm_state.clone()
        self.A = -torch.rand(layers, g.nheads, device=dev) - 0.5
        self.D = torch.randn(layers, g.nheads, device=dev)
        self.dt_bias = torch.randn(layers, g.nheads, device=dev) - 1.0
        probe = torch.empty(batch, g.nheads, g.headdim, dtype=ad, device=dev)
        self.auto_route = choose_route(self.cache.ssm_state[0], probe, self.cache.B_cache[0, :, :, 0])

    def step(self, layer: int, route: str):
        g, B, ad, dev = self.g, self.batch, self.ad, self.dev
        kw = dict(x=torch.randn(B, g.nheads, g.headdim, device=dev, dtype=ad),
                  dt=torch.randn(B, g.nheads, device=dev, dtype=ad), A=self.A[layer],
                  B=torch.randn(B, g.ngroups, g.dstate, device=dev, dtype=ad),
                  C=torch.randn(B, g.ngroups, g.dstate, device=dev, dtype=ad), D=self.D[layer],
                  z=torch.randn(B, g.nheads, g.headdim, device=dev, dtype=ad),
                  dt_bias=self.dt_bias[layer], dt_softplus=True)
        y_std = selective_state_update(self.standard_state[layer], **kw)
        y_rep = selective_state_update_replayssm(self.cache.ssm_state[layer], **kw, route=route,
                                                 **self.cache.ring_kwargs(layer))
        return y_std, y_rep


class _GDNPair:
    """Standard and replay GDN kernels on the same start, layer by layer."""

    def __init__(self, m, layers, batch, L, sd, ad, dev):
        g = self.g = m.geom
        self.batch, self.ad, self.dev = batch, ad, dev
        self.cache = GDNReplayCache(g, layers, batch, L, sd, device=dev)  # (the ring dtype the state dtype's)
        self.cache.ssm_state.normal_(std=0.1)
        self.standard_state = self.cache.ssm_state.clone()
        self.A_log = torch.rand(layers, g.num_v_heads, device=dev).log()
        self.dt_bias = torch.randn(layers, g.num_v_heads, device=dev) - 2.0
        probe_q = torch.empty(batch, g.num_k_heads, g.head_k_dim, dtype=ad, device=dev)
        probe_v = torch.empty(batch, g.num_v_heads, g.head_v_dim, dtype=ad, device=dev)
        self.auto_route = choose_gdn_route(self.cache.ssm_state[0], probe_q, probe_v)

    def step(self, layer: int, route: str):
        g, B, ad, dev = self.g, self.batch, self.ad, self.dev
        kw = dict(q=torch.randn(B, g.num_k_heads, g.head_k_dim, device=dev, dtype=ad),
                  k=torch.randn(B, g.num_k_heads, g.head_k_dim, device=dev, dtype=ad),
                  v=torch.randn(B, g.num_v_heads, g.head_v_dim, device=dev, dtype=ad),
                  a=torch.randn(B, g.num_v_heads, device=dev, dtype=ad),
                  b=torch.randn(B, g.num_v_heads, device=dev, dtype=ad),
                  A_log=self.A_log[layer], dt_bias=self.dt_bias[layer])
        y_std = fused_sigmoid_gating_delta_rule_update(self.standard_state[layer], **kw)
        y_rep = fused_recurrent_gated_delta_rule_replayssm(self.cache.ssm_state[layer], **kw, route=route,
                                                           **self.cache.ring_kwargs(layer))
        return y_std, y_rep


def decode(args: argparse.Namespace) -> int:
    """Decode ``--steps`` steps through every layer with both kernels and compare."""
    dev = _runtime.default_device()
    m = model(args.model or ("nemotron-3-super" if dev.type == "cuda" else TINY_MAMBA2.name))
    layers = args.layers or (m.num_ssm_layers if dev.type == "cuda" else 2)
    batch = args.batch or (128 if dev.type == "cuda" else 3)
    L = args.buffer_len or (16 if dev.type == "cuda" else 4)
    steps = args.steps or 3 * L + 1
    sd, ad = DTYPES[args.state_dtype], DTYPES[args.act_dtype]
    torch.manual_seed(0)
    pair = (_Mamba2Pair if m.family == "mamba2" else _GDNPair)(m, layers, batch, L, sd, ad, dev)
    route = pair.auto_route if args.route == "auto" else args.route
    if m.family == "gdn" and route not in GDN_ROUTES:
        raise SystemExit(f"GDN routes: {', '.join(GDN_ROUTES)}")

    out_err = state_err = 0.0
    flushes = 0
    for t in tqdm(range(steps), desc=f"decode {m.name} ({route})", disable=args.quiet):
        for layer in range(layers):
            y_std, y_rep = pair.step(layer, route)
            out_err = max(out_err, _rel(y_rep, y_std))
        pair.cache.advance(route=route)
        if route in FLUSH_EVERY_STEP or (t + 1) % L == 0:  # every row flushed at this step
            flushes += 1
            state_err = max(state_err, _rel(pair.cache.ssm_state, pair.standard_state))

    tol = 1e-4 if sd == torch.float32 and ad == torch.float32 else 3e-2
    ok = out_err <= tol and state_err <= tol
    rows = [["model", f"{m.name} ({m.family})"],
            ["device", str(dev) + (" (Triton interpreter)" if _runtime.INTERPRETED else "")],
            ["layers x batch", f"{layers} x {batch}"], ["buffer length L", L], ["route", route],
            ["steps (flushes)", f"{steps} ({flushes})"],
            ["max rel. diff of outputs", f"{out_err:.2e}"], ["max rel. diff of checkpoint at flushes", f"{state_err:.2e}"],
            ["agree", "yes" if ok else f"NO (tolerance {tol:g})"]]
    if dev.type == "cuda" and not args.no_timing and m.family == "mamba2":
        rows += _timing_rows(m.name, m.geom, batch, L, sd, ad)
    print(tabulate(rows, tablefmt="simple_outline"))
    return 0 if ok else 1


def _timing_rows(name, geom, batch, L, sd, ad) -> List[list]:
    from .benchmarking.mamba2_ar import Launch, Mamba2Case, make_rig

    rig = make_rig(Mamba2Case(name, geom, batch, L, sd, ad))
    std = rig.time_cycle_us(Launch("standard"))
    route = choose_route(rig.cache.ssm_state[0], rig.step["x"], rig.step["B"])
    rep = rig.time_cycle_us(Launch(route))
    return [["standard us / layer-step", f"{std:.1f}"], [f"ReplaySSM ({route}) us / layer-step", f"{rep:.1f}"],
            ["speedup (whole cycles, CUDA graphs, cold L2)", f"{std / rep:.2f}x"]]


# The GPU main job's check: in bf16 the two paths round differently and the model's
# random-weight layers amplify that to ~2% of the logits (Nano-4B: 2.2e-2, Qwen3.5-4B:
# 4.1e-2 in benchmarks/results/e2e.json), the size of a real error; in fp32 they agree to
# well under 1e-3 (tests/e2e: test_cuda_real_shapes_logits_agree_in_graphs).
FP32_CHECK_BATCH, FP32_LOGITS_TOL = 4, 1e-3


def _e2e_gpu(cfg, batch: int, L: int, steps: int) -> int:
    """The main job on a GPU: the paths' teacher-forced logits compared in fp32 over the
    same steps (a small batch), then both paths timed in bf16 at ``batch``."""
    from .e2e import HybridDecoder
    from .e2e.bench import compare_paths

    model = HybridDecoder(cfg, dtype=torch.float32, device="cuda")
    check = compare_paths(model, FP32_CHECK_BATCH, steps, 0, max_len=4 + steps + 4, buffer_len=L)
    del model
    torch.cuda.empty_cache()
    model = HybridDecoder(cfg, dtype=torch.bfloat16, device="cuda")
    res = compare_paths(model, batch, steps, 4 * L, max_len=4 + steps + 4 * L + 4, buffer_len=L)
    std, rep = res["standard_ms"], res["replay_ms"]
    rows = [["standard", f"{std:.3f}", f"{batch / std * 1e3:.0f}", "1.00x"],
            ["ReplaySSM", f"{rep:.3f}", f"{batch / rep * 1e3:.0f}", f"{std / rep:.2f}x"]]
    print(tabulate(rows, headers=["SSM step", "ms/step", "tokens/s", "speedup"]))
    ok = check["logits_rel_err"] < FP32_LOGITS_TOL
    print(f"bf16 logits relative L2 error {res['logits_rel_err']:.1e} (rounding, not a check); in fp32, "
          f"batch {FP32_CHECK_BATCH}, teacher-forced over {steps} steps: {check['logits_rel_err']:.1e}, "
          f"tolerance {FP32_LOGITS_TOL:g}")
    print(f"logits agree in fp32: {ok}")
    return 0 if ok else 1


def e2e(args) -> int:
    """Whole-model decode (``trtllm_replayssm.e2e``): standard vs ReplaySSM."""
    from .e2e import DecodeRunner, HybridDecoder, hybrid_config

    gpu = torch.cuda.is_available()
    cfg = hybrid_config(args.model or ("nemotron-3-nano-4b" if gpu else "tiny-hybrid"))
    batch, L = args.batch or (128 if gpu else 3), args.buffer_len or (16 if gpu else 4)
    steps = args.steps or 3 * L + 2
    dtype = torch.bfloat16 if gpu else torch.float32
    print(f"{cfg.name}: {len(cfg.pattern)} blocks ({cfg.num_ssm_layers} {cfg.family} mixers), batch {batch}, "
          f"L = {L}, {steps} decode steps, {str(dtype)[6:]} weights" + (" (fp32 for the check)" if gpu else "")
          + ", fp32 SSM state"
          + ("" if gpu else " (CPU: Triton interpreter)"))
    if gpu:
        return _e2e_gpu(cfg, batch, L, steps)
    model = HybridDecoder(cfg, dtype=dtype, device="cpu")
    chosen, logits = {}, {}
    for replay in (False, True):  # fp32: free-running greedy decodes must pick identical tokens
        r = DecodeRunner(model, batch, replay, max_len=4 + steps + 4, buffer_len=L)
        chosen[replay] = [r.run(1)[0] for _ in tqdm(range(steps), desc="ReplaySSM" if replay else "standard",
                                                    disable=args.quiet)]
        logits[replay] = r.logits.float().clone()
    same = all(torch.equal(a, b) for a, b in zip(chosen[False], chosen[True]))
    rows = [[("ReplaySSM" if rp else "standard"), " ".join(str(int(t[0])) for t in chosen[rp])] for rp in (False, True)]
    print(tabulate(rows, headers=["SSM step", "greedy tokens of row 0"]))
    print(f"identical greedy tokens over {steps} steps ({steps // L} ring cycles): {same}; "
          f"last logits relative error {_rel(logits[True], logits[False]):.1e}")
    return 0 if same else 1


def memory(args) -> int:
    """Capacity planning: the extra bytes of ReplaySSM per slot and for the whole batch."""
    from .integration.hf_config import load_ssm_model
    from .integration.memory import replay_memory

    try:
        m = load_ssm_model(args.model)
    except ValueError as error:  # a name or a config.json of the user's: what is wrong with it, no traceback
        raise SystemExit(f"trtllm-replayssm memory: error: {error}") from None
    mem = replay_memory(m, args.max_batch, args.buffer_len, args.state_dtype, args.ring_dtype, args.spec_tokens)
    mib = lambda b: f"{b / 2**20:,.2f} MiB"  # noqa: E731
    ring = (f"L = {args.buffer_len}" if args.spec_tokens is None else
            f"T = {args.spec_tokens}, history {args.buffer_len}: circular rings of {mem['ring_len']}")
    print(f"{m.name}: {m.num_ssm_layers} {m.family} layers, {m.geom}, {ring}")
    rows = [["SSM state (held anyway)", mib(mem["checkpoint_per_slot"]), mib(mem["checkpoint_total"])],
            ["ReplaySSM rings + cursors", mib(mem["extra_per_slot"]), mib(mem["extra_total"])]]
    if args.spec_tokens is not None:
        rows.append([f"standard spec path: {args.spec_tokens} intermediate states a row (not needed)", "",
                     mib(mem["standard_spec_total"])])
    print(tabulate(rows, headers=["", "per slot", f"{args.max_batch} slots"]))
    print(f"extra: {mem['extra_per_slot']:,} bytes per slot, {mem['extra_total']:,} bytes in total "
          f"({mem['extra_per_slot'] / mem['checkpoint_per_slot']:.1%} of the SSM state)")
    return 0


def autoload(args) -> int:
    """Install, remove or show the ``.pth`` hook behind ``TRTLLM_REPLAYSSM=1``."""
    from .integration import pth

    if args.action == "install":
        print(f"installed {pth.install(args.site)}: TRTLLM_REPLAYSSM=1 now switches ReplaySSM on in every "
              "process of this environment")
    elif args.action == "remove":
        print("removed" if pth.remove(args.site) else "nothing to remove")
    else:
        p = pth.status(args.site)
        print(f"installed: {p}" if p else "not installed (run: trtllm-replayssm autoload install)")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="trtllm-replayssm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decode", help="decode with the standard kernel and with ReplaySSM; check they agree")
    d.add_argument("--model", choices=sorted(MODELS),
                   help="geometry, Mamba2 or GDN (default: nemotron-3-super on a GPU, tiny on the CPU)")
    d.add_argument("--batch", type=positive_int, help="rows (default: 128 on a GPU, 3 on the CPU)")
    d.add_argument("--layers", type=positive_int, help="SSM layers (default: the model's on a GPU, 2 on the CPU)")
    d.add_argument("--buffer-len", type=positive_int, help="ring length L (default: 16 on a GPU, 4 on the CPU)")
    d.add_argument("--steps", type=positive_int, help="decode steps (default: 3 cycles + 1)")
    d.add_argument("--state-dtype", choices=list(DTYPES), default="fp32")
    d.add_argument("--act-dtype", choices=list(DTYPES), default="bf16")
    d.add_argument("--route", choices=list(ROUTES) + ["auto"], default="auto")
    d.add_argument("--no-timing", action="store_true", help="skip the GPU timing")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    e = sub.add_parser("e2e", help="decode a whole hybrid model (attention, MLPs, SSM mixers) both ways; compare")
    e.add_argument("--model", help="hybrid geometry (default: nemotron-3-nano-4b on a GPU, tiny-hybrid on the CPU); "
                                   "see trtllm_replayssm.e2e.HYBRID_MODELS")
    e.add_argument("--batch", type=positive_int, help="requests (default: 128 on a GPU, 3 on the CPU)")
    e.add_argument("--buffer-len", type=positive_int, help="ring length L (default: 16 on a GPU, 4 on the CPU)")
    e.add_argument("--steps", type=positive_int, help="decode steps (default: 3 cycles + 2)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    mem = sub.add_parser("memory", help="extra memory of ReplaySSM for a model and a batch size")
    mem.add_argument("--model", required=True, help="a built-in model name or a Hugging Face config.json (or its folder)")
    mem.add_argument("--max-batch", type=positive_int, required=True, help="slots (TensorRT-LLM's max_batch_size)")
    mem.add_argument("--buffer-len", type=positive_int, default=16, help="ring length L")
    mem.add_argument("--state-dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    mem.add_argument("--ring-dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                     help="Mamba2 ring (activation) dtype; GDN rings take the state dtype's (cache.gdn_ring_dtype)")
    mem.add_argument("--spec-tokens", type=positive_int, help="T = drafts + 1 with speculative decoding (MTP); the buffer "
                                                     "length is then the history budget")
    au = sub.add_parser("autoload", help="the .pth hook that applies TRTLLM_REPLAYSSM=1 in every process")
    au.add_argument("action", choices=["install", "remove", "status"])
    au.add_argument("--site", help="site-packages folder (default: this interpreter's)")
    aot = sub.add_parser("aot", help="ahead-of-time kernels: `aot build --arch 80,90,100 --out DIR` (see aot build -h)")
    aot.add_argument("action", choices=["build"])
    aot.add_argument("options", nargs=argparse.REMAINDER, help="options of the action")
    args = ap.parse_args(argv)
    return {"decode": decode, "e2e": e2e, "memory": memory, "autoload": autoload, "aot": aot_command}[args.command](args)


def aot_command(args) -> int:
    from .aot.build import main as build_main

    return build_main(args.options)


if __name__ == "__main__":
    sys.exit(main())
