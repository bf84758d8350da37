"""GDN autoregressive decode, kernel level: standard kernels vs ReplaySSM over whole cycles.

Same method and rig as :mod:`.mamba2_ar`. Baselines: the in-tree standard kernel and,
where ``fla-core`` is importable, its ``fused_recurrent_gated_delta_rule`` with the gate
and beta fused in and a V-first state (the layout this project keeps), which writes the
new state to a fresh tensor: the same read + write of the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .._runtime import default_device
from ..cache import GDNGeometry, GDNReplayCache, gdn_ring_dtype
from ..ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from ..ops.launch import LaunchConfig
from ..models import model
from .rig import ROW_BLOCK_FOLDS, CycleRig, Launch, tune_table_kernels
from .timing import layers_for_cold_l2
from .warm_compile import launch_each_candidate

ROUTES = ("output_only", "standard_step", "always_flush")
# Launch configs tried per kernel; ``block_p`` is the block of value rows (<= V). The
# replay kernels hold the ring as [L, K] / [V, L] tiles beside the [V, K] checkpoint
# tile, and with ``loop_blocks`` a program runs that many blocks of a head one after
# another (the head's ring products once for all: ``benchmarks/probe_gdn_nonflush.py``).
# Pruned with ptxas's register counts (sm_90, K = 128, ``benchmarks/kernel_registers.py``).
_C = LaunchConfig
# The standard kernel on one warp, also under a register cap (which changes ptxas's schedule:
# LaunchConfig.maxnreg): at batch 8 with a bf16 state 16 rows on one warp took 6.5 against
# 6.6 us, and the always_flush route's drain 6.6 against 7.0 us capped
# (``benchmarks/probe_standard_tiles.py``, ``results/standard_tiles.json``).
# With ``early_state`` the tile's loads are issued before the q / k norms (left to ptxas,
# uncapped, the last of them wait on the norms' shuffles); an H100's tuner took them in 25 of
# 48 cases, 0.1-2.8% ahead (``results/gdn_early_state_tried_h100.json``).
_ONE_WARP = ([_C(rows, 1, maxnreg=cap) for cap in (0, 128) for rows in (4, 8, 16)]
             + [_C(rows, 1, early_state=1) for rows in (4, 8, 16)])
CANDIDATES = {
    "standard": _ONE_WARP + [_C(8, 2), _C(16, 2), _C(16, 4), _C(32, 4)],
    "output_only": [_C(8, 1), _C(32, 4), _C(8, 1, loop_blocks=16), _C(8, 2, loop_blocks=16), _C(16, 2, loop_blocks=8),
                    _C(16, 2, loop_blocks=4), _C(16, 4, loop_blocks=8), _C(32, 4, loop_blocks=4), _C(8, 1, loop_blocks=4),
                    # staged (fp32) or plain (bf16): 8 rows over 8 blocks was the fastest in phase at
                    # Qwen3.5-4B batch 32 and 122B batch 128, where the table had prefetch configs
                    # (``benchmarks/results/gdn_nonflush_tiles.json``); 16 rows on one warp is what the
                    # tuner takes for a bf16 state at batch >= 32 (``gdn_ar.json``, 0f3858b)
                    _C(8, 1, loop_blocks=8), _C(16, 1, loop_blocks=8), _C(16, 1, loop_blocks=4)] +
                   # the loop's next block loaded into registers one block ahead
                   [_C(8, 1, loop_blocks=16, prefetch=1), _C(8, 1, loop_blocks=4, prefetch=1),
                    _C(8, 1, loop_blocks=8, prefetch=1), _C(16, 2, loop_blocks=8, prefetch=1)],
                   # Not here: one block a program with its whole tile issued early (16-64 rows,
                   # prefetch): at batch 8 its non-flush step took 15-37% more than the table's loop
                   # (H100, ``benchmarks/probe_gdn_one_block.py``, ``results/gdn_one_block_h100.json``).
                   # Nor prefetching tiles of 16-32 rows, 4 rows over 16-32 blocks or 8 over 2: 7.6-11%
                   # behind at batch 8 and 32 (H100, ``benchmarks/probe_gdn_small_batch_tiles.py``).
    "fold": [_C(16, 2, 1, 1, 8), _C(32, 4, 1, 1, 8), _C(16, 2, 1, 1), _C(32, 4, 1, 1), _C(16, 2, 1, 1, loop_blocks=8),
             _C(16, 4, 1, 1, loop_blocks=8), _C(32, 4, 1, 1, loop_blocks=4), _C(16, 2, 1, 1, 2, loop_blocks=8),
             _C(16, 2, 1, 1, loop_blocks=2),
             # one block a program under a register cap of 128 (no spill; 12 -> 16 warps an SM): H100,
             # Qwen3.5-122B batch 8, the flush step 40.6 -> 37.5 us, the cycle -1.5%; within 0.3%
             # or behind elsewhere (``probe_gdn_small_batch_tiles.py fold_caps``)
             _C(32, 4, 1, 1, maxnreg=128), _C(16, 2, 1, 1, maxnreg=128)] + ROW_BLOCK_FOLDS,
    # (Not here: folds on fp32 FMAs, fold_dot 0, in tiles of 4-16 rows: 1.3-3.1% behind the dot
    # folds at batch 8 and 32, H100, ``benchmarks/probe_gdn_small_batch_tiles.py``.)
    "always_flush": _ONE_WARP + [_C(8, 2), _C(16, 2), _C(32, 4)],
}


def candidate_configs(kernel: str, head_v_dim: int, limit: Optional[int] = None) -> List[LaunchConfig]:
    cap = 1 << (head_v_dim - 1).bit_length()
    return [c for c in CANDIDATES[kernel] if c.block_p <= cap][:limit]


def fla_fused_recurrent():
    """fla-core's kernel, or None where fla-core is not installed."""
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    except ImportError:
        return None
    return fused_recurrent_gated_delta_rule


@dataclass(frozen=True)
class GDNCase:
    model: str
    geom: GDNGeometry
    batch: int
    buffer_len: int
    state_dtype: torch.dtype
    act_dtype: torch.dtype = torch.bfloat16
    ring_dtype: Optional[torch.dtype] = None  # (None: the package's for the state dtype, cache.gdn_ring_dtype)

    def __post_init__(self):
        if self.ring_dtype is None:
            object.__setattr__(self, "ring_dtype", gdn_ring_dtype(self.state_dtype))

    @property
    def state_bytes(self) -> int:
        g = self.geom
        return (self.batch * g.num_v_heads * g.head_v_dim * g.head_k_dim
                * torch.empty((), dtype=self.state_dtype).element_size())

    def moved_bytes_per_cycle(self, kernel: str) -> int:
        L = self.buffer_len
        return (L + 1) * self.state_bytes if kernel == "output_only" else 2 * L * self.state_bytes  # standard, flush every step


class GDNRig(CycleRig):
    """``n_layers`` distinct GDN layers of one case; kernels ``standard``, ``fla`` and the
    replay routes."""

    STATELESS = ("standard", "fla")

    def __init__(self, case: GDNCase, n_layers: int, device: Optional[str] = None, seed: int = 0):
        device = device or default_device()
        torch.manual_seed(seed)
        g, B, a = case.geom, case.batch, case.act_dtype
        H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
        self.case, self.n_layers = case, n_layers
        self.cache = GDNReplayCache(g, n_layers, B, case.buffer_len, case.state_dtype, case.ring_dtype, device)
        self.cache.ssm_state.normal_(std=0.1)
        self.cache.d_cache.normal_()
        self.cache.k_cache.normal_(std=K ** -0.5)
        self.cache.g_cache.uniform_(-0.1, 0.0)
        self.slot_idx = torch.arange(B, dtype=torch.int32, device=device)
        self.step = dict(
            q=torch.randn(B, H, K, device=device, dtype=a), k=torch.randn(B, H, K, device=device, dtype=a),
            v=torch.randn(B, HV, V, device=device, dtype=a), a=torch.randn(B, HV, device=device, dtype=a),
            b=torch.randn(B, HV, device=device, dtype=a), A_log=torch.rand(HV, device=device).log(),
            dt_bias=torch.randn(HV, device=device), initial_state_indices=self.slot_idx,
            out=torch.empty(B, HV, V, device=device, dtype=a),
        )
        self.fla = fla_fused_recurrent()

    def baseline_launch(self) -> Launch:
        """fla-core's fused recurrent kernel where it is installed (faster at batch >= 128)."""
        return Launch("fla") if self.fla is not None else Launch("standard")

    TABLE_KERNELS = ("standard", "always_flush", "fold", "output_only")

    def table_shape(self) -> dict:
        g = self.case.geom
        return dict(headdim=g.head_v_dim, dstate=g.head_k_dim, nheads=g.num_v_heads, family="gdn")

    def layer_step(self, launch: Launch, layer: int) -> None:
        state = self.cache.ssm_state[layer]
        if launch.kernel == "standard":
            fused_sigmoid_gating_delta_rule_update(state, **self.step, config=launch.config)
        elif launch.kernel == "fla":
            s = self.step
            self.fla(q=s["q"][:, None], k=s["k"][:, None], v=s["v"][:, None], g=s["a"][:, None], beta=s["b"][:, None],
                     A_log=s["A_log"], dt_bias=s["dt_bias"], use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                     use_qk_l2norm_in_kernel=True, initial_state=state, output_final_state=True, state_v_first=True)
        else:
            fused_recurrent_gated_delta_rule_replayssm(state, **self.step, route=launch.kernel, config=launch.config,
                                                       fold_config=launch.fold_config, **self.cache.ring_kwargs(layer))


def make_gdn_rig(case: GDNCase) -> GDNRig:
    return GDNRig(case, layers_for_cold_l2(case.state_bytes) if torch.cuda.is_available() else 2)


# What tune_gdn_case can tune: the standard kernel (whose config standard_step takes too:
# launch.config_kernel), the always_flush route's (the standard kernel with the drain),
# the replay launches (the fold and the non-flush launch, tuned together), the fold alone
# (under the table's non-flush launch) or the non-flush launch alone (under the table's
# fold).
TUNABLE = ("standard", "always_flush", "replay", "fold", "nonflush")


def tune_gdn_case(rig: GDNRig, replays: int = 5, limit: Optional[int] = None,
                  kernels: Sequence[str] = TUNABLE) -> Dict[str, Dict]:
    """Fastest launch configs of ``kernels`` (of :data:`TUNABLE`) for this case, on whole
    cycles (:func:`~.rig.tune_table_kernels`; the non-flush launch on 8 rows over 16 blocks
    while the fold is tuned)."""
    hv = rig.case.geom.head_v_dim
    return tune_table_kernels(rig, lambda k: candidate_configs(k, hv, limit), kernels,
                              LaunchConfig(8, 1, loop_blocks=16), replays)


def warm_group(group: Tuple[str, torch.dtype, torch.dtype, int, str]) -> int:
    """Compile ``kernel``'s candidates for ``(model, state dtype, ring dtype, L, kernel)``:
    a worker of :func:`.warm_compile.warm_compile`, at batch 8 (as :func:`.mamba2_ar.warm_group`)."""
    name, state_dtype, ring_dtype, L, kernel = group
    case = GDNCase(name, model(name).geom, 8, L, state_dtype, ring_dtype=ring_dtype)
    return launch_each_candidate(GDNRig(case, 1), {kernel: candidate_configs(kernel, case.geom.head_v_dim)})
