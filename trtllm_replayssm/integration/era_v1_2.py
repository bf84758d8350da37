"""The TensorRT-LLM 1.2 adapter: the Python ``MambaCacheManager`` of that era holds
``ssm_states (layers, slots, ...)`` and ``conv_states`` tensors allocated in its
constructor (before the memory-profiling run, so rings allocated beside them are counted),
hands slots out in ``prepare_resources`` and has no speculative decode for these models.
"""

from __future__ import annotations

import functools
from typing import List, Optional

import torch

from ..cache import GDNGeometry, Mamba2Geometry
from .eras import UnsupportedTensorRTLLM
from .hooks import StateRegistry
from .lifecycle import ReplaySlots
from .switch import ReplayOptions

MANAGER_METHODS = ("prepare_resources", "free_resources", "get_state_indices")


def missing_features(cls, opts: ReplayOptions) -> List[str]:
    return [m for m in MANAGER_METHODS if not hasattr(cls, m)]


def extend(cls, opts: ReplayOptions, registry: StateRegistry, gdn_order: Optional[str] = None) -> List[str]:
    """Rings beside the manager's SSM states; cursor reset for slots of new requests; for
    GDN, the rings of decode rows folded into their states before a step that mixes
    prefill and decode (TensorRT-LLM sends those rows through the chunked kernel, which
    reads and rewrites the state)."""
    init, prepare = cls.__init__, cls.prepare_resources

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        ssm, conv = _state_pools(self)
        self._replayssm = (attach_gdn_rings(ssm, conv, opts, gdn_order, registry) if gdn_order
                           else attach_rings(ssm, conv, opts, registry))

    @functools.wraps(prepare)
    def prepare_resources(self, scheduled_batch, *args, **kwargs):
        out = prepare(self, scheduled_batch, *args, **kwargs)
        replay = getattr(self, "_replayssm", None)
        if replay is None:
            return out
        device = replay.write_pos.device
        ctx = list(getattr(scheduled_batch, "context_requests", []))
        gen = list(getattr(scheduled_batch, "generation_requests", []))
        if gdn_order and ctx and gen:
            slots = self.get_state_indices([r.py_request_id for r in gen])
            replay.make_exact(list(self.ssm_states), torch.as_tensor(slots, dtype=torch.int32, device=device))
        if ctx:
            slots = self.get_state_indices([r.py_request_id for r in ctx])
            replay.on_slots_assigned(torch.as_tensor(slots, dtype=torch.int32, device=device))
        return out

    cls.__init__, cls.prepare_resources = __init__, prepare_resources
    return [f"{cls.__module__}.{cls.__name__}"]


def _state_pools(manager):
    ssm, conv = getattr(manager, "ssm_states", None), getattr(manager, "conv_states", None)
    if not (isinstance(ssm, torch.Tensor) and ssm.dim() == 5 and isinstance(conv, torch.Tensor) and conv.dim() == 4):
        raise UnsupportedTensorRTLLM(f"{type(manager).__name__} has no (layers, slots, ...) ssm_states / "
                                     "conv_states tensors")
    return ssm, conv


def attach_rings(ssm_pool: torch.Tensor, conv_pool: torch.Tensor, opts: ReplayOptions,
                 registry: StateRegistry) -> ReplaySlots:
    """Rings for an engine's Mamba2 pools, ``ssm (layers, slots, H, P, N)`` and
    ``conv (layers, slots, H*P + 2*G*N, d_conv - 1)`` (which gives the group count),
    allocated now (before the engine's memory profiling) and registered by address."""
    layers, slots, H, P, N = ssm_pool.shape
    groups, rem = divmod(conv_pool.shape[2] - H * P, 2 * N)
    if rem or groups < 1:
        raise UnsupportedTensorRTLLM(f"conv_states width {conv_pool.shape[2]} is not H*P + 2*G*N for "
                                     f"H={H}, P={P}, N={N}")
    replay = ReplaySlots(Mamba2Geometry(nheads=H, headdim=P, dstate=N, ngroups=groups), layers, slots,
                         opts.buffer_len, act_dtype=conv_pool.dtype, device=ssm_pool.device,
                         route="output_only" if opts.route == "auto" else opts.route)
    registry.register_pool(ssm_pool, replay)
    return replay


def attach_gdn_rings(ssm_pool: torch.Tensor, conv_pool: torch.Tensor, opts: ReplayOptions, order: str,
                     registry: StateRegistry) -> ReplaySlots:
    """Rings for an engine's GDN pools, ``ssm (layers, slots, HV, V, K)`` (or ``HV, K, V``
    with ``order="HV,K,V"``) and ``conv (layers, slots, 2*H*K + HV*V, d_conv - 1)`` (which
    gives the key-head count), allocated now and registered by address."""
    layers, slots, HV = ssm_pool.shape[:3]
    K, V = (ssm_pool.shape[4], ssm_pool.shape[3]) if order == "HV,V,K" else (ssm_pool.shape[3], ssm_pool.shape[4])
    H, rem = divmod(conv_pool.shape[2] - HV * V, 2 * K)
    if rem or H < 1 or HV % H:
        raise UnsupportedTensorRTLLM(f"conv_states width {conv_pool.shape[2]} is not 2*H*K + HV*V for HV={HV}, "
                                     f"K={K}, V={V} (state pool order {order})")
    replay = ReplaySlots(GDNGeometry(num_k_heads=H, num_v_heads=HV, head_k_dim=K, head_v_dim=V), layers, slots,
                         opts.buffer_len, state_dtype=ssm_pool.dtype, device=ssm_pool.device,
                         route="output_only" if opts.route == "auto" else opts.route, gdn_pool_order=order)
    registry.register_pool(ssm_pool, replay)
    return replay
