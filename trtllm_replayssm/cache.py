"""Replay cache allocation: checkpoints, rings and cursors for layers x slots.

Mamba2 shapes follow ``replayssm.md`` section 1, one leading layer dimension added (GDN:
section 2, see :class:`GDNReplayCache`):

| tensor      | shape                 | dtype        |
|-------------|-----------------------|--------------|
| ssm_state   | (layers, slots, H, P, N) | state dtype |
| x_cache     | (layers, slots, H, L, P) | activation dtype |
| dt_cache    | (layers, slots, H, L)    | fp32 |
| B_cache     | (layers, slots, G, L, N) | activation dtype |
| write_pos   | (slots,)                 | int32, shared by all layers |

Everything is zero-initialised; a slot entering decode gets ``write_pos = 0`` and its
checkpoint is the state prefill wrote.

An engine may own the ring memory instead (``rings=``: per-layer views of its pool, each
``(slots, *block)`` slot-major, e.g. TensorRT-LLM's KV cache manager V2 pages); then only
the cursors are allocated here. :func:`mamba2_ring_layout` / :func:`gdn_ring_layout` give
the per-slot block of each ring, what such an engine must reserve.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch

from ._validation import FLOAT_DTYPES, check_buffer_len, check_count, check_dtype, check_slot_major, check_tensor
from .ops.cursors import FLUSH_EVERY_STEP, advance_write_pos, reset_write_pos


RingLayout = Dict[str, Tuple[Tuple[int, ...], torch.dtype]]  # ring name -> (per-slot block shape, dtype)


def _bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def block_bytes(block: Tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of one slot's block of a ring (or state) of this shape and dtype."""
    return math.prod(block) * _bytes(dtype)


def ring_bytes(layout: RingLayout) -> int:
    """Bytes of one slot's rings in one layer."""
    return sum(block_bytes(block, dtype) for block, dtype in layout.values())


def _allocate(cache, geom, num_layers: int, num_slots: int, buffer_len: int, state_block: Tuple[int, ...],
              state_dtype: torch.dtype, layout: RingLayout, device, with_state: bool,
              rings: Optional[Mapping[str, Sequence[torch.Tensor]]]) -> None:
    """What every replay cache holds: its sizes, the checkpoint pool ``(layers, slots,
    *state_block)`` (unless the engine owns it), one attribute per ring of ``layout``
    (allocated, or the engine's views) and the cursors."""
    check_buffer_len(buffer_len)
    check_count("num_layers", num_layers)
    check_count("num_slots", num_slots)
    check_dtype("state_dtype", state_dtype, FLOAT_DTYPES)
    cache.geom, cache.num_layers, cache.num_slots, cache.buffer_len = geom, num_layers, num_slots, buffer_len
    cache.state_dtype = state_dtype
    cache.ssm_state = (torch.zeros(num_layers, num_slots, *state_block, dtype=state_dtype, device=device)
                       if with_state else None)
    for name, views in _ring_views(layout, num_layers, num_slots, device, rings).items():
        setattr(cache, name, views)
    cache.write_pos = torch.zeros(num_slots, dtype=torch.int32, device=device)


def _check_sizes(geom) -> None:
    """Every size of a layer geometry a positive int."""
    for field in dataclasses.fields(geom):
        check_count(f"{type(geom).__name__}.{field.name}", getattr(geom, field.name))


def _ring_views(layout: RingLayout, num_layers: int, num_slots: int, device,
                rings: Optional[Mapping[str, Sequence[torch.Tensor]]]) -> Dict[str, Sequence[torch.Tensor]]:
    """Zeroed ``(layers, slots, *block)`` rings, or the engine's per-layer views, checked."""
    if rings is None:
        return {name: torch.zeros(num_layers, num_slots, *block, dtype=dtype, device=device)
                for name, (block, dtype) in layout.items()}
    if set(rings) != set(layout):
        raise ValueError(f"rings must have the views {sorted(layout)}, got {sorted(rings)}")
    device = torch.empty(0, device=device).device  # "cuda" -> "cuda:0", as tensors report it
    for name, (block, dtype) in layout.items():
        if len(rings[name]) != num_layers:
            raise ValueError(f"rings[{name!r}] must have {num_layers} layer views, got {len(rings[name])}")
        for i, view in enumerate(rings[name]):
            check_tensor(f"rings[{name!r}][{i}]", view, (num_slots, *block), (dtype,), device)
            check_slot_major(f"rings[{name!r}][{i}]", view)
    return {name: list(rings[name]) for name in layout}


@dataclass(frozen=True)
class Mamba2Geometry:
    """One Mamba2 layer: heads ``H``, headdim ``P``, dstate ``N``, groups ``G``."""

    nheads: int
    headdim: int
    dstate: int
    ngroups: int

    def __post_init__(self):
        _check_sizes(self)
        if self.nheads % self.ngroups != 0:
            raise ValueError(f"ngroups ({self.ngroups}) must divide nheads ({self.nheads})")


class Mamba2LayerCache(NamedTuple):
    """Views of one layer, as the decode step takes them."""

    ssm_state: torch.Tensor  # (slots, H, P, N)
    x_cache: torch.Tensor  # (slots, H, L, P)
    dt_cache: torch.Tensor  # (slots, H, L)
    B_cache: torch.Tensor  # (slots, G, L, N)
    write_pos: torch.Tensor  # (slots,)


def mamba2_bytes_per_slot(geom: Mamba2Geometry, buffer_len: int, num_layers: int = 1,
                          state_dtype: torch.dtype = torch.float32,
                          act_dtype: torch.dtype = torch.bfloat16) -> Dict[str, int]:
    """Exact bytes one slot holds: the checkpoint (what the standard path holds anyway),
    the ring (what ReplaySSM adds) and the cursor."""
    check_count("buffer_len", buffer_len)  # not limited to 64: the memory estimate sizes speculative rings too
    checkpoint = num_layers * block_bytes((geom.nheads, geom.headdim, geom.dstate), state_dtype)
    ring = num_layers * ring_bytes(mamba2_ring_layout(geom, buffer_len, act_dtype))
    cursors = 4
    return {"checkpoint": checkpoint, "ring": ring, "cursors": cursors, "extra": ring + cursors,
            "total": checkpoint + ring + cursors}


def mamba2_ring_layout(geom: Mamba2Geometry, buffer_len: int, act_dtype: torch.dtype = torch.bfloat16) -> RingLayout:
    """Per-slot block of each ring of one layer."""
    H, P, N, G, L = geom.nheads, geom.headdim, geom.dstate, geom.ngroups, buffer_len
    return {"x_cache": ((H, L, P), act_dtype), "dt_cache": ((H, L), torch.float32), "B_cache": ((G, L, N), act_dtype)}


class Mamba2ReplayCache:
    """Checkpoint pool, rings and cursors of ``num_layers`` Mamba2 layers and ``num_slots`` slots.

    ``with_state=False``: an engine owns the state pool; ``rings``: it owns the ring memory
    too (per-layer views, see the module docstring); the cursors always live here."""

    def __init__(self, geom: Mamba2Geometry, num_layers: int, num_slots: int, buffer_len: int,
                 state_dtype: torch.dtype = torch.float32, act_dtype: torch.dtype = torch.bfloat16,
                 device: torch.device | str = "cuda", with_state: bool = True,
                 rings: Optional[Mapping[str, Sequence[torch.Tensor]]] = None):
        check_dtype("act_dtype", act_dtype, FLOAT_DTYPES)
        self.act_dtype = act_dtype
        _allocate(self, geom, num_layers, num_slots, buffer_len, (geom.nheads, geom.headdim, geom.dstate), state_dtype,
                  mamba2_ring_layout(geom, buffer_len, act_dtype), device, with_state, rings)

    def layer(self, i: int) -> Mamba2LayerCache:
        return Mamba2LayerCache(self.ssm_state[i], self.x_cache[i], self.dt_cache[i], self.B_cache[i], self.write_pos)

    def ring_kwargs(self, i: int) -> dict:
        """Keyword arguments of layer ``i``'s ring for the replay decode step."""
        return dict(x_cache=self.x_cache[i], dt_cache=self.dt_cache[i], B_cache=self.B_cache[i],
                    write_pos=self.write_pos)

    def bytes_per_slot(self) -> Dict[str, int]:
        return mamba2_bytes_per_slot(self.geom, self.buffer_len, self.num_layers, self.state_dtype, self.act_dtype)

    def advance(self, state_batch_indices=None, force_flush=None, route: str = "output_only",
                pad_slot_id: int = -1, batch=None) -> None:
        """After all layers of a step ran: move the cursors (see :func:`advance_write_pos`)."""
        advance_write_pos(self.write_pos, self.buffer_len, state_batch_indices, force_flush,
                          flush_all=route in FLUSH_EVERY_STEP, pad_slot_id=pad_slot_id, batch=batch)

    def reset(self, slots: torch.Tensor, pad_slot_id: int = -1) -> None:
        """Slots entering decode: empty their rings."""
        reset_write_pos(self.write_pos, slots, pad_slot_id)


@dataclass(frozen=True)
class GDNGeometry:
    """One Gated DeltaNet layer: key heads ``H``, value heads ``HV``, head dims ``K``, ``V``."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int

    def __post_init__(self):
        _check_sizes(self)
        if self.num_v_heads % self.num_k_heads != 0:
            raise ValueError(f"num_k_heads ({self.num_k_heads}) must divide num_v_heads ({self.num_v_heads})")


class GDNLayerCache(NamedTuple):
    """Views of one GDN layer, as the decode step takes them."""

    ssm_state: torch.Tensor  # (slots, HV, V, K)
    d_cache: torch.Tensor  # (slots, HV, L, V)
    k_cache: torch.Tensor  # (slots, H, L, K)
    g_cache: torch.Tensor  # (slots, HV, L)
    write_pos: torch.Tensor  # (slots,)


def gdn_ring_dtype(state_dtype: torch.dtype, speculative: bool = False) -> torch.dtype:
    """The dtype of the ``d`` and ``k`` rings for a state dtype, the drift study's choice
    (README, "GDN ring dtype"): bf16 beside a bf16 state, whose standard kernel rounds the
    state every step (a bf16 ring drifts 0.31x the standard kernel's at 4096 steps, and a
    cycle moves 8% fewer bytes), fp32 otherwise (beside an fp32 state a bf16 ring drifts
    1844x the standard kernel's; an fp16 state was not studied). The speculative verify's
    circular rings stay fp32 (a bf16 ring was not measured there)."""
    return torch.bfloat16 if state_dtype == torch.bfloat16 and not speculative else torch.float32


def gdn_bytes_per_slot(geom: GDNGeometry, buffer_len: int, num_layers: int = 1,
                       state_dtype: torch.dtype = torch.float32,
                       ring_dtype: Optional[torch.dtype] = None) -> Dict[str, int]:
    """Exact bytes one slot holds (see :func:`mamba2_bytes_per_slot`); ``ring_dtype``
    by default :func:`gdn_ring_dtype`'s."""
    check_count("buffer_len", buffer_len)
    ring_dtype = ring_dtype or gdn_ring_dtype(state_dtype)
    checkpoint = num_layers * block_bytes((geom.num_v_heads, geom.head_v_dim, geom.head_k_dim), state_dtype)
    ring = num_layers * ring_bytes(gdn_ring_layout(geom, buffer_len, ring_dtype))
    return {"checkpoint": checkpoint, "ring": ring, "cursors": 4, "extra": ring + 4, "total": checkpoint + ring + 4}


def gdn_ring_layout(geom: GDNGeometry, buffer_len: int, ring_dtype: torch.dtype) -> RingLayout:
    """Per-slot block of each ring of one layer (``ring_dtype``: the ``d`` and ``k``
    rings', :func:`gdn_ring_dtype`)."""
    H, HV, K, V, L = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim, buffer_len
    return {"d_cache": ((HV, L, V), ring_dtype), "k_cache": ((H, L, K), ring_dtype), "g_cache": ((HV, L), torch.float32)}


class GDNReplayCache:
    """Checkpoint pool ``(layers, slots, HV, V, K)``, rings of corrected values ``d``,
    normalised keys ``k`` and log-decays ``g``, and the cursors, for ``num_layers`` GDN
    layers. ``ring_dtype`` is the dtype of the ``d`` and ``k`` rings, by default
    :func:`gdn_ring_dtype`'s for ``state_dtype``. ``with_state`` and ``rings`` as in
    :class:`Mamba2ReplayCache`."""

    def __init__(self, geom: GDNGeometry, num_layers: int, num_slots: int, buffer_len: int,
                 state_dtype: torch.dtype = torch.float32, ring_dtype: Optional[torch.dtype] = None,
                 device: torch.device | str = "cuda", with_state: bool = True,
                 rings: Optional[Mapping[str, Sequence[torch.Tensor]]] = None):
        self.ring_dtype = ring_dtype = ring_dtype or gdn_ring_dtype(state_dtype)
        check_dtype("ring_dtype", ring_dtype, FLOAT_DTYPES)
        _allocate(self, geom, num_layers, num_slots, buffer_len, (geom.num_v_heads, geom.head_v_dim, geom.head_k_dim),
                  state_dtype, gdn_ring_layout(geom, buffer_len, ring_dtype), device, with_state, rings)

    def layer(self, i: int) -> GDNLayerCache:
        return GDNLayerCache(self.ssm_state[i], self.d_cache[i], self.k_cache[i], self.g_cache[i], self.write_pos)

    def ring_kwargs(self, i: int) -> dict:
        """Keyword arguments of layer ``i``'s ring for the replay decode step."""
        return dict(d_cache=self.d_cache[i], k_cache=self.k_cache[i], g_cache=self.g_cache[i],
                    write_pos=self.write_pos)

    def bytes_per_slot(self) -> Dict[str, int]:
        return gdn_bytes_per_slot(self.geom, self.buffer_len, self.num_layers, self.state_dtype, self.ring_dtype)

    advance = Mamba2ReplayCache.advance
    reset = Mamba2ReplayCache.reset
