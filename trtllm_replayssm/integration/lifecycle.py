"""The per-slot life of ReplaySSM state inside an engine, with no engine types.

An engine (TensorRT-LLM's Mamba cache manager) owns the SSM state pool and hands slots to
requests; :class:`ReplaySlots` keeps the rings and cursors beside it and is told of each
event. A slot's life:

1. **assigned** (prefill wrote its final state): :meth:`on_slots_assigned` empties the
   ring, so that state is the checkpoint;
2. **decode steps**: per layer :meth:`mamba2_step` / :meth:`gdn_step` (drop-in for the
   engine's state update, same arguments), then once per step :meth:`after_step` moves the
   cursors on the device (inside a captured graph; padding rows never move);
3. **speculative verify** (``spec=(T, Bh)``): :meth:`mamba2_verify` / :meth:`gdn_verify`
   and :meth:`commit` with the accepted counts;
4. **exact state needed** (a mixed prefill + decode batch whose decode rows go through the
   chunked kernel, a state handed elsewhere): :meth:`make_exact` folds the ring into the
   state and empties it;
5. **freed or preempted**: nothing to fold (the state leaves with the request, or is
   recomputed by a later prefill); the next :meth:`on_slots_assigned` starts it clean.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

import torch

from ..cache import GDNGeometry, GDNReplayCache, Mamba2Geometry, Mamba2ReplayCache, gdn_ring_dtype
from ..ops.fold import fold_gdn_rings, fold_mamba2_rings
from ..ops.gdn import ROUTES as GDN_ROUTES
from ..ops.gdn import choose_gdn_route, fused_recurrent_gated_delta_rule_replayssm
from ..ops.gdn.spec import gdn_replayssm_spec_decode
from ..ops.mamba2 import ROUTES as MAMBA2_ROUTES
from ..ops.mamba2 import choose_route, selective_state_update_replayssm
from ..ops.mamba2.spec import (
    check_spec_sizes,
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    ring_capacity,
    selective_state_update_replayssm_spec,
)


class ReplaySlots:
    """Rings and cursors of ``num_layers`` SSM layers for ``num_slots`` engine slots.

    ``spec=None``: autoregressive rings of ``buffer_len`` entries; ``spec=(T, Bh)``:
    circular rings of ``ring_capacity(T, Bh)`` entries for speculative verify.
    ``state_dtype``: the engine's state dtype, which picks a GDN ring's dtype
    (:func:`~trtllm_replayssm.cache.gdn_ring_dtype`); ``act_dtype``: a Mamba2 ring's. ``rings``:
    the engine's per-layer ring views (see :mod:`trtllm_replayssm.cache`) instead of
    rings allocated here. ``cursor_mirror (slots, C)`` int32, any strides: a copy of each
    slot's cursors (``write_pos``; with ``spec``, ``origin`` and ``is_flush`` too, so
    ``C >= 3``) kept where the engine moves a slot's data (its pool pages), written
    whenever a cursor changes; :meth:`restore_cursors` reads it back for a request that
    arrives at a new slot with its pages."""

    def __init__(self, geom, num_layers: int, num_slots: int, buffer_len: int = 16,
                 act_dtype: torch.dtype = torch.bfloat16, state_dtype: torch.dtype = torch.float32,
                 device="cuda", pad_slot_id: int = -1, spec: Optional[Tuple[int, int]] = None,
                 route: str = "output_only", gdn_pool_order: str = "HV,V,K",
                 rings: Optional[Mapping[str, Sequence[torch.Tensor]]] = None,
                 cursor_mirror: Optional[torch.Tensor] = None):
        if gdn_pool_order not in ("HV,V,K", "HV,K,V"):
            raise ValueError(f"gdn_pool_order must be 'HV,V,K' or 'HV,K,V', got {gdn_pool_order!r}")
        routes = (*(GDN_ROUTES if isinstance(geom, GDNGeometry) else MAMBA2_ROUTES), "auto")
        if route not in routes:  # (else the first decode step would raise, inside the engine's forward)
            raise ValueError(f"route must be one of {routes}, got {route!r}")
        if spec is not None:
            check_spec_sizes(*spec)
        self.geom, self.pad_slot_id, self.spec, self.route = geom, pad_slot_id, spec, route
        # An engine whose GDN pool is [slots, HV, K, V] (TensorRT-LLM 1.2) hands the kernels
        # its transposed view, which they take as it is.
        self.gdn_pool_order = gdn_pool_order
        ring_len = buffer_len if spec is None else ring_capacity(*spec)
        if isinstance(geom, GDNGeometry):
            self.rings = GDNReplayCache(geom, num_layers, num_slots, ring_len, state_dtype,
                                        gdn_ring_dtype(state_dtype, speculative=spec is not None),
                                        device=device, with_state=False, rings=rings)
        elif isinstance(geom, Mamba2Geometry):
            self.rings = Mamba2ReplayCache(geom, num_layers, num_slots, ring_len, act_dtype=act_dtype, device=device,
                                           with_state=False, rings=rings)
        else:
            raise TypeError(f"geom must be a Mamba2Geometry or a GDNGeometry, got {type(geom).__name__}")
        self._step_route = "output_only" if route == "auto" else route  # the route of the step under way
        self._A = {}  # Mamba2: each layer's A as its last decode step passed it, for make_exact
        self.origin = torch.zeros(num_slots, dtype=torch.int32, device=device)
        self.is_flush = torch.zeros(num_slots, dtype=torch.int8, device=device)
        self._cursors = [self.write_pos] if spec is None else [self.write_pos, self.origin, self.is_flush]
        if cursor_mirror is not None:
            if (cursor_mirror.dim() != 2 or cursor_mirror.shape[0] != num_slots
                    or cursor_mirror.shape[1] < len(self._cursors) or cursor_mirror.dtype != torch.int32):
                raise ValueError(f"cursor_mirror must be an int32 ({num_slots}, >= {len(self._cursors)}) tensor, got "
                                 f"{cursor_mirror.dtype} {tuple(cursor_mirror.shape)}")
            cursor_mirror.zero_()
        self.cursor_mirror = cursor_mirror

    @property
    def write_pos(self) -> torch.Tensor:
        return self.rings.write_pos

    def extra_bytes(self) -> int:
        """Bytes this object allocated (what ReplaySSM adds to the engine's memory beside
        rings the engine's own pool holds)."""
        tensors = [t for t in vars(self.rings).values() if isinstance(t, torch.Tensor)] + [self.origin, self.is_flush]
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- slot events ----------------------------------------------------------------------
    def on_slots_assigned(self, slots: torch.Tensor) -> None:
        """Prefill wrote these slots' states: they are the checkpoints; rings start empty."""
        self.rings.reset(slots, self.pad_slot_id)
        if self.spec is not None:
            reset_replayssm_spec_cursors(self.write_pos, self.origin, self.is_flush, slots, *self.spec,
                                         pad_slot_id=self.pad_slot_id)
        self._mirror(slots)

    def restore_cursors(self, slots: torch.Tensor) -> None:
        """Requests that moved to ``slots`` with their pages (checkpoint, ring and cursor
        mirror): their cursors come back from the mirror."""
        if self.cursor_mirror is None:
            raise ValueError("restore_cursors reads the cursor mirror: construct ReplaySlots with cursor_mirror")
        idx = slots.long()
        for column, cursor in enumerate(self._cursors):
            cursor[idx] = self.cursor_mirror[idx, column].to(cursor.dtype)

    def _mirror(self, slots: torch.Tensor) -> None:
        """On the device, no host sync (it runs inside captured steps); padding rows
        (``pad_slot_id < 0``) copy slot 0 onto itself."""
        if self.cursor_mirror is not None:
            idx = slots.long().clamp_min(0)
            for column, cursor in enumerate(self._cursors):
                self.cursor_mirror[idx, column] = cursor[idx].to(torch.int32)

    def make_exact(self, states: Sequence[torch.Tensor], slots: torch.Tensor,
                   A: Optional[Sequence[torch.Tensor]] = None) -> None:
        """Fold the rings of ``slots`` into ``states[layer]`` (Mamba2 needs each layer's
        ``A``; by default the one its last decode step passed) and empty them.
        Autoregressive rings only (a verify ring folds on its own)."""
        if self.spec is not None:
            raise ValueError("make_exact folds autoregressive rings; speculative rings flush at verify")
        slots = slots[slots != self.pad_slot_id]
        r = self.rings
        if A is None and isinstance(r, Mamba2ReplayCache):
            A = [self._A.get(i) for i in range(len(states))]  # None: the layer never stepped, its ring is empty
        for i, state in enumerate(states):
            if isinstance(r, GDNReplayCache):
                fold_gdn_rings(self.gdn_state(state), r.d_cache[i], r.k_cache[i], r.g_cache[i], r.write_pos, slots)
            elif A[i] is not None:
                fold_mamba2_rings(state, r.x_cache[i], r.dt_cache[i], r.B_cache[i], A[i], r.write_pos, slots)
        r.reset(slots, self.pad_slot_id)
        self._mirror(slots)

    # -- decode ---------------------------------------------------------------------------
    def mamba2_step(self, layer: int, state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                    state_batch_indices=None, pad_slot_id=None, out=None, disable_state_update=False):
        """TensorRT-LLM's ``selective_state_update`` arguments (a decode step that keeps the
        state is not a replay step: :mod:`.hooks` sends those to the engine's kernel)."""
        if disable_state_update:
            raise ValueError("disable_state_update=True has no ReplaySSM step; call the engine's kernel")
        self._A[layer] = A
        return selective_state_update_replayssm(
            state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices, pad_slot_id=self._pad(pad_slot_id), out=out,
            route=self._route_for_step(lambda: choose_route(state, x, B)), **self.rings.ring_kwargs(layer))

    def gdn_state(self, state: torch.Tensor) -> torch.Tensor:
        """An engine's GDN state (pool or layer) as the kernels take it, ``(..., V, K)``."""
        return state.transpose(-1, -2) if self.gdn_pool_order == "HV,K,V" else state

    def gdn_step(self, layer: int, state, q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True,
                 initial_state_indices=None, pad_slot_id=None, out=None, softplus_beta=1.0, softplus_threshold=20.0):
        state = self.gdn_state(state)
        return fused_recurrent_gated_delta_rule_replayssm(
            state, q, k, v, a, b, A_log, dt_bias, scale, use_qk_l2norm, initial_state_indices,
            self._pad(pad_slot_id), out, softplus_beta, softplus_threshold,
            route=self._route_for_step(lambda: choose_gdn_route(state, q, v)),
            **self.rings.ring_kwargs(layer))

    def after_step(self, state_batch_indices: torch.Tensor, batch: Optional[int] = None) -> None:
        """Once per decode step, after every layer ran: cursors move on the device."""
        self.rings.advance(state_batch_indices, route=self._step_route, pad_slot_id=self.pad_slot_id, batch=batch)
        self._mirror(state_batch_indices if batch is None else state_batch_indices[:batch])

    def _route_for_step(self, measured) -> str:
        """The route of this step (every layer of a step has the same batch, so the same
        route; :meth:`after_step` advances the cursors by it). With ``route="auto"`` the
        dispatcher's choice for the step's batch size, where ``standard_step`` becomes
        ``always_flush``: an engine's batch size changes from step to step, so a slot may
        arrive from a replay route with a non-empty ring, which that route folds first."""
        if self.route == "auto":
            route = measured()
            self._step_route = "always_flush" if route == "standard_step" else route
        return self._step_route

    # -- speculative verify ---------------------------------------------------------------
    def _spec_kwargs(self) -> dict:
        return dict(write_pos=self.write_pos, origin=self.origin, is_flush=self.is_flush, history_len=self.spec[1])

    def mamba2_verify(self, layer: int, state, x, dt, A, B, C, **kw):
        r = self.rings
        kw.setdefault("pad_slot_id", self.pad_slot_id)
        return selective_state_update_replayssm_spec(state, x, dt, A, B, C, **kw, x_ring=r.x_cache[layer],
                                                     dt_ring=r.dt_cache[layer], B_ring=r.B_cache[layer],
                                                     **self._spec_kwargs())

    def gdn_verify(self, layer: int, state, q, k, v, a, b, A_log, dt_bias, **kw):
        r = self.rings
        kw.setdefault("pad_slot_id", self.pad_slot_id)
        return gdn_replayssm_spec_decode(self.gdn_state(state), q, k, v, a, b, A_log, dt_bias, **kw,
                                         d_ring=r.d_cache[layer], k_ring=r.k_cache[layer], g_ring=r.g_cache[layer],
                                         **self._spec_kwargs())

    def commit(self, accepted: torch.Tensor, state_batch_indices: torch.Tensor) -> None:
        """After acceptance (TensorRT-LLM's ``update_mamba_states`` point): ``accepted (B,)``
        tokens per row, bonus included; rows with 0 (padding) do not move."""
        commit_replayssm_spec(self.write_pos, self.origin, self.is_flush, accepted, *self.spec,
                              state_batch_indices, self.pad_slot_id)
        self._mirror(state_batch_indices)

    def _pad(self, pad_slot_id: Optional[int]) -> int:
        return self.pad_slot_id if pad_slot_id is None else pad_slot_id
