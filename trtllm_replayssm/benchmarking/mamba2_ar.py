"""Mamba2 autoregressive decode, kernel level: standard vs ReplaySSM over whole cycles.

A *cycle* is L decode steps with the cursors advancing 0..L-1, so it holds exactly one
flush per slot; each step runs every rotated layer and then advances the cursors once, as
a model would. Results are per layer-step: cycle time / (L x layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .._runtime import default_device
from ..ops.cursors import FLUSH_EVERY_STEP
from ..cache import Mamba2Geometry, Mamba2ReplayCache
from ..ops.mamba2 import selective_state_update, selective_state_update_replayssm
from ..models import mamba2_model
from ..ops.launch import LaunchConfig
from .rig import ROW_BLOCK_FOLDS, CycleRig, Launch, tune_table_kernels
from .timing import layers_for_cold_l2
from .warm_compile import launch_each_candidate

ROUTES = ("output_only", "state_and_output", "standard_step", "always_flush")
KERNELS = ("standard",) + ROUTES

# Tuning candidates, pruned with ptxas's register counts (sm_90): tiles that need > ~170
# registers a thread lose on occupancy. (block_p, num_warps) tiles of the standard kernel:
_C = LaunchConfig
_STANDARD_TILES = [(4, 1), (8, 1), (16, 1), (32, 1), (8, 2), (16, 2), (16, 4), (32, 4)]
_ALWAYS_FLUSH_TILES = [(4, 1), (8, 1), (16, 1), (8, 2), (16, 2), (32, 4)]


def _with_early_terms(tiles) -> list:
    """The standard kernel's tiles in both forms: ``D`` and ``z`` loaded late, and early
    (``early_terms``: faster at small batches, more registers at large ones; both measured)."""
    return [_C(*t) for t in tiles] + [_C(*t, early_terms=1) for t in tiles]


CANDIDATES = {
    "standard": _with_early_terms(_STANDARD_TILES),
    # fold_chunk: ring entries loaded together (0: the ring as whole tiles)
    "output_only": [_C(16, 1), _C(16, 1, 4), _C(32, 1), _C(32, 1, 4), _C(32, 2), _C(32, 4), _C(32, 4, 4),
                    _C(64, 2, 4), _C(64, 4), _C(64, 4, 4), _C(16, 1, 0), _C(32, 1, 0), _C(32, 2, 0), _C(32, 4, 0),
                    _C(64, 4, 0), _C(64, 2, 0),
                    # a warp over a head's 64 rows (Super): half the programs of 32 rows, and each
                    # program's fixed cost (slot, cursor, ring) paid once for twice the state; 70-72
                    # registers with a bf16 state, which the tuner takes at batch >= 32
                    _C(64, 1), _C(64, 1, 4), _C(64, 1, 8),
                    # a program over a run of row blocks of its head (the ring's weights formed
                    # once a run; Nano-4B's headdim 80 in 5 blocks of 16: a head a program), which
                    # the tuner takes for Nano-4B's bf16 state at batch >= 32 and fp32 at 32
                    _C(16, 1, 0, loop_blocks=5), _C(16, 2, 0, loop_blocks=5), _C(32, 1, 0, loop_blocks=2),
                    _C(32, 2, 0, loop_blocks=2), _C(32, 1, 0, loop_blocks=3)],
    # The fold launch (a kernel of its own, one tf32x3 matmul over the ring; tiles of at
    # least 16 rows) also runs, and returns at once, on every non-flush step, so fewer,
    # larger programs can win over the fastest flush step: heads_per_prog is the heads one
    # fold program loops over, loop_blocks the blocks of a head's rows it runs one after
    # another (the head's B tile and ring scalars loaded once; 8: all of them), row_block
    # the batch rows it looks through (rig.ROW_BLOCK_FOLDS).
    "fold": [_C(16, 2, 1, 1), _C(32, 4, 1, 1), _C(32, 8, 1, 1), _C(16, 2, 1, 1, loop_blocks=4),
             _C(16, 2, 1, 1, heads_per_prog=2, loop_blocks=4), _C(16, 2, 1, 1, loop_blocks=8)] + ROW_BLOCK_FOLDS,
    "state_and_output": [_C(8, 1), _C(8, 1, 2), _C(16, 1), _C(32, 2), _C(32, 4), _C(32, 4, 2),
                         # the checkpoint loaded before the cursor (early_state): 13-14% faster
                         # with an fp32 state at batch 32-128 (not with bf16); on output_only's
                         # non-flush launch it lost (154 registers at 32 rows; mamba2_early_state.json)
                         _C(8, 1, 2, early_state=1), _C(16, 1, early_state=1)],
    "always_flush": _with_early_terms(_ALWAYS_FLUSH_TILES),
}


def candidate_configs(kernel: str, headdim: int, limit: Optional[int] = None) -> List[LaunchConfig]:
    """The launch configs a tuning sweep tries for ``kernel`` at this headdim (the first
    ``limit`` of them, if given)."""
    cap = 1 << (headdim - 1).bit_length()
    return [c for c in CANDIDATES[kernel] if c.block_p <= cap][:limit]


@dataclass(frozen=True)
class Mamba2Case:
    model: str
    geom: Mamba2Geometry
    batch: int
    buffer_len: int
    state_dtype: torch.dtype
    act_dtype: torch.dtype = torch.bfloat16

    @property
    def state_bytes(self) -> int:
        g = self.geom
        return self.batch * g.nheads * g.headdim * g.dstate * torch.empty((), dtype=self.state_dtype).element_size()

    def moved_bytes_per_cycle(self, kernel: str) -> int:
        """State bytes a cycle must move: read+write every step (standard, always_flush),
        or read every step and write once (replay)."""
        L = self.buffer_len
        return 2 * L * self.state_bytes if kernel in ("standard",) + FLUSH_EVERY_STEP else (L + 1) * self.state_bytes


class Mamba2Rig(CycleRig):
    """``n_layers`` distinct layers (checkpoints, rings, step inputs) of one case on the GPU,
    with the step inputs in TensorRT-LLM's tied layout."""

    def __init__(self, case: Mamba2Case, n_layers: int, device: Optional[str] = None, seed: int = 0):
        device = device or default_device()
        torch.manual_seed(seed)
        g, B, a = case.geom, case.batch, case.act_dtype
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        self.case, self.n_layers = case, n_layers
        self.cache = Mamba2ReplayCache(g, n_layers, B, case.buffer_len, case.state_dtype, a, device)
        self.cache.ssm_state.normal_()
        self.cache.x_cache.normal_()
        self.cache.B_cache.normal_()
        self.cache.dt_cache.uniform_(0.01, 0.1)
        self.slot_idx = torch.arange(B, dtype=torch.int32, device=device)
        A = -torch.rand(H, device=device) - 0.5
        self.step = dict(
            x=torch.randn(B, H, P, device=device, dtype=a),
            dt=torch.randn(B, H, device=device, dtype=a)[:, :, None].expand(B, H, P),
            A=A[:, None, None].expand(H, P, N),
            B=torch.randn(B, G, N, device=device, dtype=a),
            C=torch.randn(B, G, N, device=device, dtype=a),
            D=torch.randn(H, device=device)[:, None].expand(H, P),
            z=torch.randn(B, H, P, device=device, dtype=a),
            dt_bias=torch.randn(H, device=device)[:, None].expand(H, P),
            dt_softplus=True,
            state_batch_indices=self.slot_idx,
            out=torch.empty(B, H, P, device=device, dtype=a),
        )

    TABLE_KERNELS = ("standard", "state_and_output", "always_flush", "fold", "output_only")

    def table_shape(self) -> dict:
        g = self.case.geom
        return dict(headdim=g.headdim, dstate=g.dstate, nheads=g.nheads, family="mamba2")

    def layer_step(self, launch: Launch, layer: int) -> None:
        if launch.kernel == "standard":
            selective_state_update(self.cache.ssm_state[layer], **self.step, config=launch.config)
        else:
            selective_state_update_replayssm(self.cache.ssm_state[layer], **self.step, route=launch.kernel,
                                             config=launch.config, fold_config=launch.fold_config,
                                             **self.cache.ring_kwargs(layer))

def make_rig(case: Mamba2Case) -> Mamba2Rig:
    """A rig with enough layers for a cold L2 (two on the CPU, where nothing is timed)."""
    return Mamba2Rig(case, layers_for_cold_l2(case.state_bytes) if torch.cuda.is_available() else 2)


# What tune_case can tune: the standard kernel, the state_and_output route, the always_flush
# route's launch (the standard kernel with the cursor check and the drain, tuned on its own
# route, which the TensorRT-LLM glue runs where the table says standard_step; standard_step
# runs on the standard kernel's config: launch.config_kernel), the replay launches (the
# fold and the non-flush launch, tuned together), the fold alone (under the table's
# non-flush launch) or the non-flush launch alone (under the table's fold).
TUNABLE = ("standard", "state_and_output", "always_flush", "replay", "fold", "nonflush")


def tune_case(rig: Mamba2Rig, replays: int = 5, limit: Optional[int] = None,
              kernels: Sequence[str] = TUNABLE) -> Dict[str, Dict]:
    """Fastest launch configs of ``kernels`` (of :data:`TUNABLE`) for this case, on whole
    cycles (:func:`~.rig.tune_table_kernels`)."""
    hd = rig.case.geom.headdim
    return tune_table_kernels(rig, lambda k: candidate_configs(k, hd, limit), kernels, LaunchConfig(32, 1, 4), replays)


def warm_group(group: Tuple[str, torch.dtype, int, str]) -> int:
    """Compile ``kernel``'s candidates for ``(model, state dtype, L, kernel)``: a worker of
    :func:`.warm_compile.warm_compile`, at batch 8 (a case whose integer arguments Triton
    specialises otherwise, such as batch 1, still compiles in the tuning process)."""
    name, state_dtype, L, kernel = group
    case = Mamba2Case(name, mamba2_model(name).geom, 8, L, state_dtype)
    return launch_each_candidate(Mamba2Rig(case, 1), {kernel: candidate_configs(kernel, case.geom.headdim)})
