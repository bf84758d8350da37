"""Drop-in replacements for an engine's SSM state-update functions, on plain tensors.

The engine's state pool ``(layers, slots, ...)`` is registered with the
:class:`ReplaySlots` that holds its rings; a call whose ``state`` is one of those layer
views (found by address) runs the ReplaySSM kernel, and the call for the last registered
layer of a step moves the cursors, on the device, inside whatever graph is being
captured. Every other call (prefill, speculative verify, a state that is not registered,
arguments the replay path does not take) goes to the engine's own function unchanged.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .lifecycle import ReplaySlots


class StateRegistry:
    def __init__(self):
        self._by_ptr: Dict[int, Tuple[ReplaySlots, int, bool]] = {}

    def register_pool(self, pool: torch.Tensor, replay: ReplaySlots, layers: Optional[Sequence[int]] = None) -> None:
        """``pool (layers, slots, ...)``: layer ``i``'s view uses ring ``layers[i]``."""
        self.register_layers(list(pool), replay, layers)

    def register_layers(self, views: Sequence[torch.Tensor], replay: ReplaySlots,
                        layers: Optional[Sequence[int]] = None) -> None:
        """One state view per layer (an engine whose layers' pools are apart); view ``i``
        uses ring ``layers[i]``; the last view's call ends a step."""
        layers = list(range(len(views))) if layers is None else list(layers)
        for i, (view, ring_layer) in enumerate(zip(views, layers)):
            self._by_ptr[view.data_ptr()] = (replay, ring_layer, i == len(layers) - 1)

    def unregister(self, replay: ReplaySlots) -> None:
        """Forget every view of ``replay`` (its engine pool is being released)."""
        self._by_ptr = {ptr: hit for ptr, hit in self._by_ptr.items() if hit[0] is not replay}

    def lookup(self, state: torch.Tensor) -> Optional[Tuple[ReplaySlots, int, bool]]:
        return self._by_ptr.get(state.data_ptr())

    def clear(self) -> None:
        self._by_ptr.clear()


def make_mamba2_update(original: Callable, registry: StateRegistry) -> Callable:
    """TensorRT-LLM's ``selective_state_update(state, x, dt, A, B, C, D, z, dt_bias,
    dt_softplus, state_batch_indices, pad_slot_id, out, disable_state_update,
    intermediate_states_buffer, cache_steps, ...)``. On a pool registered with verify
    rings (``ReplaySlots(spec=...)``), the speculative verify call (``x (B, T, H, P)``,
    ``cache_steps=T``, ``disable_state_update=True``) runs ReplaySSM's verify, which keeps
    the drafts in the ring instead of T intermediate states (the commit comes with
    acceptance); anything else on such a pool is an error, not a silent fallback."""

    def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_batch_indices=None, pad_slot_id=-1, out=None, disable_state_update=False,
                               intermediate_states_buffer=None, cache_steps=None, **extra):
        hit = registry.lookup(state)
        if hit is not None and hit[0].spec is not None:  # a pool with verify rings: every decode call verifies
            replay, layer, _ = hit
            extra.pop("intermediate_state_indices", None)  # rows of the intermediate states it does not keep
            if x.dim() != 4 or cache_steps != x.shape[1] or not disable_state_update or extra:
                raise RuntimeError(f"ReplaySSM verify rings (T={replay.spec[0]}) got a call it cannot serve: x "
                                   f"{tuple(x.shape)}, cache_steps={cache_steps}, disable_state_update="
                                   f"{disable_state_update}, other arguments {sorted(extra)}")
            return replay.mamba2_verify(layer, state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                        dt_softplus=dt_softplus, state_batch_indices=state_batch_indices,
                                        pad_slot_id=pad_slot_id, out=out)
        if (hit is None or x.dim() != 3 or disable_state_update or intermediate_states_buffer is not None
                or cache_steps is not None or extra):
            return original(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                            state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out,
                            disable_state_update=disable_state_update,
                            intermediate_states_buffer=intermediate_states_buffer, cache_steps=cache_steps, **extra)
        replay, layer, last = hit
        y = replay.mamba2_step(layer, state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                               state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out)
        if last:
            replay.after_step(state_batch_indices)
        return y

    selective_state_update.__wrapped__ = original
    return selective_state_update


def make_gdn_update(original: Callable, registry: StateRegistry) -> Callable:
    """``fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta,
    softplus_threshold, q, k, v, b, initial_state_source, initial_state_indices, scale,
    use_qk_l2norm_in_kernel, cu_seqlens, output)`` on the state pool ``[slots, HV, V, K]``.
    Decode tokens arrive either batched, ``q (N, 1, H, K)`` without ``cu_seqlens``, or
    packed varlen, ``q (1, N, H, K)`` with ``cu_seqlens (N + 1,)``: one token per sequence
    exactly when the token count equals the sequence count (shapes only: no host sync)."""

    def fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b,
                                               initial_state_source, initial_state_indices, scale=None,
                                               use_qk_l2norm_in_kernel=False, cu_seqlens=None, output=None,
                                               **extra):
        hit = registry.lookup(initial_state_source)
        if hit is not None and hit[0].spec is not None:
            raise RuntimeError("ReplaySSM verify rings got an autoregressive GDN decode call; with speculative "
                               "decoding every decode step is a verify step")
        batched = q.dim() == 4 and q.shape[1] == 1 and cu_seqlens is None
        packed = (q.dim() == 4 and q.shape[0] == 1 and cu_seqlens is not None
                  and cu_seqlens.shape[0] == q.shape[1] + 1 == initial_state_indices.shape[0] + 1)
        if hit is None or not (batched or packed) or extra:
            return original(A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=softplus_beta,
                            softplus_threshold=softplus_threshold, q=q, k=k, v=v, b=b,
                            initial_state_source=initial_state_source, initial_state_indices=initial_state_indices,
                            scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens,
                            output=output, **extra)
        replay, layer, last = hit
        n = initial_state_indices.shape[0]
        rows = (lambda t: t[:, 0]) if batched else (lambda t: t[0])  # (N, heads, dim) views, no copy
        o = replay.gdn_step(layer, initial_state_source, rows(q), rows(k), rows(v), a.reshape(n, -1),
                            b.reshape(n, -1), A_log, dt_bias, scale, use_qk_l2norm_in_kernel, initial_state_indices,
                            out=None if output is None else output.view(n, *output.shape[-2:]),
                            softplus_beta=softplus_beta, softplus_threshold=softplus_threshold)
        if last:
            replay.after_step(initial_state_indices)
        if output is not None:
            return output
        return o.view(n, 1, *o.shape[1:]) if batched else o.view(1, n, *o.shape[1:])

    fused_sigmoid_gating_delta_rule_update.__wrapped__ = original
    return fused_sigmoid_gating_delta_rule_update


@dataclass
class GDNVerifyCall:
    """What a GDN layer knows at a verify step and its kernel call does not: the pool the
    states were gathered from and their slots, the raw gates ``a, b (B * T, HV)`` and the
    layer's ``A_log``, ``dt_bias`` (the call gets ``g``, ``beta`` already computed)."""

    pool: torch.Tensor
    slots: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor


class GDNVerifyScope:
    """The verify call under way (set by the engine's layer around its verify; a stack, so
    a nested call cannot see a stale one)."""

    def __init__(self):
        self._calls: List[GDNVerifyCall] = []

    @contextlib.contextmanager
    def active(self, call: GDNVerifyCall):
        self._calls.append(call)
        try:
            yield
        finally:
            self._calls.pop()

    def current(self) -> Optional[GDNVerifyCall]:
        return self._calls[-1] if self._calls else None


def make_gdn_verify_update(original: Callable, registry: StateRegistry, scope: GDNVerifyScope) -> Callable:
    """``fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source,
    initial_state_indices, use_qk_l2norm_in_kernel, disable_state_update,
    intermediate_states_buffer, cache_steps, ...)``, TensorRT-LLM main's GDN verify entry
    (``q, k (B, T, H, K)``, ``v (B, T, HV, V)``), which gets a gathered copy of the states:
    inside a :class:`GDNVerifyScope` whose pool has verify rings, ReplaySSM's verify runs on
    that pool at the scope's slots (no intermediate states); anything else goes to the
    original."""

    def fused_recurrent_gated_delta_rule_update(q, k, v, g=None, beta=None, initial_state_source=None,
                                                initial_state_indices=None, use_qk_l2norm_in_kernel=False,
                                                disable_state_update=False, intermediate_states_buffer=None,
                                                cache_steps=None, **extra):
        call = scope.current()
        hit = None if call is None else registry.lookup(call.pool)
        if hit is None or hit[0].spec is None:
            return original(q=q, k=k, v=v, g=g, beta=beta, initial_state_source=initial_state_source,
                            initial_state_indices=initial_state_indices,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, disable_state_update=disable_state_update,
                            intermediate_states_buffer=intermediate_states_buffer, cache_steps=cache_steps, **extra)
        replay, layer, _ = hit
        Bsz, T = q.shape[0], q.shape[1]
        scale = extra.pop("scale", None)
        if cache_steps != T or not disable_state_update or extra or call.slots.shape[0] != Bsz:
            raise RuntimeError(f"ReplaySSM GDN verify got a call it cannot serve: q {tuple(q.shape)}, cache_steps="
                               f"{cache_steps}, disable_state_update={disable_state_update}, {call.slots.shape[0]} "
                               f"slots, other arguments {sorted(extra)}")
        return replay.gdn_verify(layer, call.pool, q, k, v, call.a.reshape(Bsz, T, -1), call.b.reshape(Bsz, T, -1),
                                 call.A_log, call.dt_bias, scale=scale, use_qk_l2norm=use_qk_l2norm_in_kernel,
                                 initial_state_indices=call.slots.to(torch.int32))

    fused_recurrent_gated_delta_rule_update.__wrapped__ = original
    return fused_recurrent_gated_delta_rule_update


# The state-pool order of TensorRT-LLM's GDN decode kernel changed between releases
# ([slots, HV, K, V] in the 1.2 era, [slots, HV, V, K] on main): read it from the kernel's
# state addressing. ReplaySSM's kernels take both (a [.., K, V] pool as its transposed view).
_ORDER_PATTERNS = (
    ("HV,V,K", re.compile(r"o_v\[None,\s*:\]\s*\*\s*K")),  # element [k, v] at v*K + k
    ("HV,K,V", re.compile(r"o_k\[:,\s*None\]\s*\*\s*V")),  # element [k, v] at k*V + v
)


def gdn_state_order(source: str) -> Optional[str]:
    """``"HV,V,K"``, ``"HV,K,V"`` or None (unknown or both) from a GDN decode kernel's source."""
    found = {order for order, pattern in _ORDER_PATTERNS if pattern.search(source)}
    return found.pop() if len(found) == 1 else None


def gdn_state_order_of(function: Callable) -> Optional[str]:
    """The pool order the module defining ``function`` (TensorRT-LLM's GDN decode entry) uses."""
    module = inspect.getmodule(getattr(function, "__wrapped__", function))
    try:
        return gdn_state_order(inspect.getsource(module))
    except (OSError, TypeError):
        return None
