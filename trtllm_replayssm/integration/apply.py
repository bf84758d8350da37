"""``apply_replayssm``: switch ReplaySSM on in this process's TensorRT-LLM.

What it does, all or nothing (every hook is checked before anything is patched):
- replaces the module-level state-update functions the Mamba2 / GDN mixers call with the
  drop-in ones of :mod:`.hooks` (decode steps on registered pools run ReplaySSM);
- extends the Mamba cache manager: rings and cursors allocated with its states (so the
  memory profiling run sees them), registered by the address of each layer's state, and
  the cursors of slots given to new requests reset after ``prepare_resources``.
Logged once per process. Everything here is TensorRT-LLM-version-specific only through
:mod:`.eras`; it has not run against a real install on the machines of this project.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Dict, Optional, Sequence

import torch

from ..cache import GDNGeometry, Mamba2Geometry
from .eras import Era, UnsupportedTensorRTLLM, detect_era
from .hooks import StateRegistry, gdn_state_order_of, make_gdn_update, make_mamba2_update
from .lifecycle import ReplaySlots
from .switch import ReplayOptions

log = logging.getLogger("trtllm_replayssm")
REGISTRY = StateRegistry()
_APPLIED: Dict[str, object] = {}
MANAGER_METHODS = ("prepare_resources", "free_resources", "get_state_indices")


def apply_replayssm(models: Optional[Sequence[str]] = None, buffer_len: int = 16, route: str = "auto",
                    speculative: bool = False, *, options: Optional[ReplayOptions] = None,
                    version: Optional[str] = None) -> Dict[str, object]:
    """Patch TensorRT-LLM for ReplaySSM decode; returns what was patched. ``models``:
    mixer families (``mamba2``, ``gdn``). Raises :class:`UnsupportedTensorRTLLM` (nothing
    patched) for an unknown version, a missing hook or an unsupported combination."""
    opts = options or ReplayOptions(buffer_len, route, tuple(models or ("mamba2",)), speculative)
    if _APPLIED:
        if _APPLIED["options"] != opts:
            raise RuntimeError(f"ReplaySSM is already applied with {_APPLIED['options']}")
        return dict(_APPLIED)
    era = detect_era(opts.families, version)
    if opts.speculative and not era.speculative:
        raise UnsupportedTensorRTLLM(f"{era.name} has no speculative decode for these models; "
                                     "speculative ReplaySSM needs TensorRT-LLM >= 1.3")
    if opts.speculative:
        raise UnsupportedTensorRTLLM("speculative ReplaySSM inside TensorRT-LLM is not wired yet "
                                     "(the kernels and cursor ops are: trtllm_replayssm.ops.*.spec)")
    gdn_order = None
    if "gdn" in opts.families:
        if "mamba2" in opts.families:
            raise UnsupportedTensorRTLLM("one model family at a time: models=['mamba2'] (Nemotron-H) or ['gdn'] "
                                         "(Qwen3-Next / Qwen3.5); the engine's SSM pool holds one of them")
        hook = next(h for h in era.hooks if h.family == "gdn")
        gdn_order = gdn_state_order_of(hook.resolve())
        if gdn_order is None:
            raise UnsupportedTensorRTLLM(f"{era.name}'s GDN decode kernel uses a state pool order this adapter cannot "
                                         "read (supported: [slots, HV, V, K] and [slots, HV, K, V]); nothing was "
                                         "patched")
    manager_cls = _manager_class(era)
    missing = [m for m in MANAGER_METHODS if not hasattr(manager_cls, m)]
    if missing:
        raise UnsupportedTensorRTLLM(f"{manager_cls.__name__} lacks {missing}; nothing was patched")
    patched = []
    for hook in era.hooks:
        if hook.family not in opts.families:
            continue
        module = importlib.import_module(hook.module)
        original = getattr(module, hook.attr)
        make = make_mamba2_update if hook.family == "mamba2" else make_gdn_update
        setattr(module, hook.attr, make(original, REGISTRY))
        patched.append(f"{hook.module}.{hook.attr}")
    _extend_manager(manager_cls, opts, gdn_order)
    patched.append(f"{manager_cls.__module__}.{manager_cls.__name__}")
    _APPLIED.update(era=era.name, options=opts, patched=tuple(patched))
    log.warning("trtllm_replayssm: ReplaySSM on (%s, L=%d, route=%s): patched %s", era.name, opts.buffer_len,
                opts.route, ", ".join(patched))
    return dict(_APPLIED)


def _manager_class(era: Era):
    hook = next(h for h in era.hooks if h.family == "cache")
    return hook.resolve()


def _extend_manager(cls, opts: ReplayOptions, gdn_order: Optional[str] = None) -> None:
    """Rings beside the manager's SSM states; cursor reset for slots of new requests; for
    GDN, the rings of decode rows folded into their states before a step that mixes
    prefill and decode (TensorRT-LLM sends those rows through the chunked kernel, which
    reads and rewrites the state)."""
    init, prepare = cls.__init__, cls.prepare_resources

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        ssm, conv = _state_pools(self)
        self._replayssm = (attach_gdn_rings(ssm, conv, opts, gdn_order) if gdn_order
                           else attach_rings(ssm, conv, opts))

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


def _state_pools(manager):
    ssm, conv = getattr(manager, "ssm_states", None), getattr(manager, "conv_states", None)
    if not (isinstance(ssm, torch.Tensor) and ssm.dim() == 5 and isinstance(conv, torch.Tensor) and conv.dim() == 4):
        raise UnsupportedTensorRTLLM(f"{type(manager).__name__} has no (layers, slots, ...) ssm_states / "
                                     "conv_states tensors")
    return ssm, conv


def attach_rings(ssm_pool: torch.Tensor, conv_pool: torch.Tensor, opts: ReplayOptions,
                 registry: StateRegistry = REGISTRY) -> ReplaySlots:
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
                     registry: StateRegistry = REGISTRY) -> ReplaySlots:
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
                         opts.buffer_len, device=ssm_pool.device,
                         route="output_only" if opts.route == "auto" else opts.route, gdn_pool_order=order)
    registry.register_pool(ssm_pool, replay)
    return replay


def applied() -> Dict[str, object]:
    return dict(_APPLIED)
