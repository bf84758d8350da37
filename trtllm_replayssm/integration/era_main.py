"""The TensorRT-LLM main-era adapter (>= 1.3): the hybrid cache manager on KV cache
manager V2, extended through its Mamba cache features (``MambaAuxCacheExtension``).
Written against NVIDIA/TensorRT-LLM main of 2026
(``_torch/pyexecutor/kv_cache/mamba_cache_manager/``); :mod:`.eras` checks every name
used here before anything is patched.

Where the ReplaySSM state lives:
- **Rings**: V2 pool buffers of each Mamba layer, declared by the extension's
  ``buffer_configs``. They sit in each slot's page beside its state, so the pool's memory
  plan counts them, and whatever the pool does with a slot's page (move a live request to
  another slot, offload and onboard it, commit it for prefix reuse) carries the ring
  with its checkpoint.
- **Cursors**: the kernels take one packed int32 vector, allocated here. A mirror of each
  slot's cursor is a pool buffer too (the first Mamba layer's), written whenever a cursor
  changes (inside the captured step as well); a live request that arrives at a new slot
  gets its cursor back from there.

Slot events: a slot given to a new request is reset (the extension's ``reset_slots``; a
disaggregated arrival: ``on_state_transfer_complete``). A request whose slot moved has
its cursor restored, and on GDN a step that mixes prefill and decode first folds the
decode rows' rings (main's GDN sends those rows through the chunked kernel, which reads
and rewrites the state): both after ``prepare_resources``. With block reuse on, a freed
request's ring is folded before the manager may commit its page for reuse. Padding rows
use the manager's reserved dummy slots: their rings and cursors are scratch.

Speculative decoding (MTP, ``speculative=True`` / ``TRTLLM_REPLAYSSM_SPEC=1``):
the manager gets :func:`make_strategy_class`'s state-update strategy instead of
TensorRT-LLM's. The rings are circular (``ring_capacity(T, Bh)`` entries, ``Bh`` the
buffer length); the mixer's verify call (``cache_steps=T``) runs ReplaySSM's verify on the
registered pool and keeps no intermediate states; ``update_mamba_states`` (inside the
captured step) commits the cursors by the accepted counts and promotes the accepted conv
window, which the strategy keeps per batch row as TensorRT-LLM's does. GDN's verify
gathers the states into a copy before its kernel call, so its layer's verify is wrapped to
name the pool and slots for the kernel entry (:func:`patch_gdn_verify`).

Refused, with the reason: the deprecated V1 managers (no cache features), speculative
decoding unless switched on, dynamic draft lengths and trees,
stochastic rounding of fp16 states, a model family other than the one switched on.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import os
from typing import Dict, List, Optional, Tuple

import torch

from ..cache import (GDNGeometry, Mamba2Geometry, RingLayout, block_bytes, gdn_ring_dtype, gdn_ring_layout,
                     mamba2_ring_layout)
from .eras import UnsupportedTensorRTLLM
from .hf_config import from_hf_config
from .hooks import GDNVerifyCall, GDNVerifyScope, StateRegistry, make_gdn_verify_update
from ..ops.mamba2.spec import MAX_T, ring_capacity
from .lifecycle import ReplaySlots
from .switch import ReplayOptions

EXTENSION_KEY = "trtllm_replayssm"
STRATEGY_KEY = "trtllm_replayssm_verify"
KV_MAMBA = "tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager"
KV_V2 = "tensorrt_llm.runtime.kv_cache_manager_v2"
LEGACY_MANAGERS = ("PythonMambaCacheManager", "CppMambaHybridCacheManager", "MixedMambaHybridCacheManager")
RING_NAMES = {"mamba2": ("x_cache", "dt_cache", "B_cache"), "gdn": ("d_cache", "k_cache", "g_cache")}
CONV_LAYOUT = {"mamba2": "x_b_c", "gdn": "q_k_v"}  # the manager's conv_state_layout of each family
CURSOR_BLOCK = 4  # int32 entries a slot's cursor mirror takes (16 bytes: write_pos, origin, is_flush)
PAGE_ALIGN = 64  # bytes every buffer declared here is rounded up to (:func:`page_bytes`)


def page_bytes(block: Tuple[int, ...], dtype: torch.dtype) -> int:
    """A declared buffer's size: a slot's ``block`` of ``dtype``, its bytes rounded up to
    ``PAGE_ALIGN``. V2 derives a buffer's slot stride and each layer's base from the
    declared sizes; at multiples of 64 bytes both stay multiples of 16 elements of any
    dtype up to 4 bytes, whatever the ring length and heads a rank. The kernels need that:
    without it Triton drops its
    divisibility specialisation (Nano-4B's replay steps 24-50% slower,
    ``benchmarks/bench_gapped_pools.py``) and the AOT kernels refuse the launch."""
    return -(-block_bytes(block, dtype) // PAGE_ALIGN) * PAGE_ALIGN


def page_view(manager, local_layer: int, role, block: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``(slots, *block)``: one layer's buffer of ``role`` in the pool, the block at the
    start of its padded page."""
    page_elems = page_bytes(block, dtype) // dtype.itemsize
    page = manager._get_state_buffer(local_layer, role, dtype, [page_elems])
    return page[:, :math.prod(block)].view(page.shape[0], *block)


def spec_sizes(spec_config, opts: ReplayOptions) -> Optional[Tuple[int, int]]:
    """``(T, Bh)`` of the verify rings, None without speculative decoding; refuses what
    ReplaySSM's verify does not take (the message says why)."""
    if spec_config is None:
        return None
    if not opts.speculative:
        raise UnsupportedTensorRTLLM(
            "ReplaySSM: speculative decoding is configured but ReplaySSM's speculative path is off. Set "
            "TRTLLM_REPLAYSSM_SPEC=1 (apply_replayssm(speculative=True)) for ReplaySSM's verify, or unset "
            "TRTLLM_REPLAYSSM to keep TensorRT-LLM's own.")
    draft = getattr(spec_config, "max_draft_len", None) or 0
    total = getattr(spec_config, "max_total_draft_tokens", None) or draft
    if getattr(spec_config, "draft_len_schedule", None) or total != draft or (
            (getattr(spec_config, "acceptance_rate_window_size", 0) or 0) > 0
            and (getattr(spec_config, "acceptance_rate_threshold", 0) or 0) > 0):
        raise UnsupportedTensorRTLLM("ReplaySSM's verify rings are sized for one draft length: dynamic draft "
                                     "lengths, draft trees and the acceptance-rate fallback are refused")
    T = draft + 1
    if not 2 <= T <= MAX_T or not T <= opts.buffer_len:
        raise UnsupportedTensorRTLLM(f"ReplaySSM verify takes 1..{MAX_T - 1} drafts with a history budget "
                                     f"TRTLLM_REPLAYSSM_BUFFER_LEN >= drafts + 1; got {draft} drafts, budget "
                                     f"{opts.buffer_len}")
    if os.environ.get("TRTLLM_MAMBA2_MTP_USE_CUSTOM_OP", "0") == "1":
        raise UnsupportedTensorRTLLM("TRTLLM_MAMBA2_MTP_USE_CUSTOM_OP=1 sends the verify past the state-update "
                                     "function ReplaySSM replaces; unset it")
    return T, opts.buffer_len


def ring_geometry(context, family: str, gdn_order: Optional[str]):
    """This rank's layer geometry from the manager's build context."""
    a, b, c = context.ssm_state_shape
    if family == "mamba2":
        return Mamba2Geometry(nheads=a, headdim=b, dstate=c, ngroups=context.n_groups_per_rank)
    V, K = (b, c) if gdn_order == "HV,V,K" else (c, b)
    return GDNGeometry(num_k_heads=context.n_groups_per_rank, num_v_heads=a, head_k_dim=K, head_v_dim=V)


def ring_layout(geom, buffer_len: int, act_dtype: torch.dtype, state_dtype: Optional[torch.dtype] = None,
                speculative: bool = False) -> RingLayout:
    """Mamba2 rings hold activations in their dtype; GDN rings take the state dtype's
    (``gdn_ring_dtype``, the drift study's choice), fp32 where it is not known (the
    estimator's upper bound)."""
    if isinstance(geom, Mamba2Geometry):
        return mamba2_ring_layout(geom, buffer_len, act_dtype)
    return gdn_ring_layout(geom, buffer_len, gdn_ring_dtype(state_dtype, speculative) if state_dtype else torch.float32)


def ring_bytes_per_slot(geom, buffer_len: int, act_dtype: torch.dtype) -> int:
    """One layer's ring bytes per slot as declared (padded pages), for the estimator, which
    knows no state dtype (GDN: fp32 rings, the upper bound)."""
    layout = ring_layout(geom, buffer_len, act_dtype)
    return sum(page_bytes(block, dtype) for block, dtype in layout.values())


def make_extension_class(base, buffer_config, data_role):
    """``MambaAuxCacheExtension`` subclass (its base and V2 types come from the installed
    TensorRT-LLM) holding one manager's rings and cursors."""

    class ReplaySSMRings(base):
        def __init__(self, opts: ReplayOptions, family: str, gdn_order: Optional[str], registry: StateRegistry,
                     spec: Optional[Tuple[int, int]]):
            self.opts, self.family, self.gdn_order, self.registry = opts, family, gdn_order, registry
            self.replay: Optional[ReplaySlots] = None
            self.spec = spec  # (T, Bh) with speculative decoding (:func:`spec_sizes` of the manager's spec_config)
            self.states: List[torch.Tensor] = []
            self._slot_of: Dict[int, int] = {}  # request id -> slot at its last scheduled step
            self._roles = {name: data_role(f"replayssm_{name}") for name in (*RING_NAMES[family], "cursor")}

        @property
        def key(self) -> str:
            return EXTENSION_KEY

        @property
        def data_roles(self):
            return tuple(self._roles.values())

        def validate(self, context) -> None:
            if context.stochastic_rounding:
                raise UnsupportedTensorRTLLM("ReplaySSM does not round fp16 states stochastically; turn "
                                             "mamba_ssm_stochastic_rounding off or unset TRTLLM_REPLAYSSM")
            if context.conv_state_layout != CONV_LAYOUT[self.family]:
                raise UnsupportedTensorRTLLM(
                    f"ReplaySSM was switched on for {self.family} layers (TRTLLM_REPLAYSSM_MODELS) but this model's "
                    f"recurrent layers use the {context.conv_state_layout!r} layout of the other family")

        def _layout(self, context) -> RingLayout:
            ring_len = self.opts.buffer_len if self.spec is None else ring_capacity(*self.spec)
            return ring_layout(ring_geometry(context, self.family, self.gdn_order), ring_len, context.conv_state_dtype,
                               context.ssm_state_dtype, speculative=self.spec is not None)

        def buffer_configs(self, context, layer_id: int):
            if layer_id not in context.mamba_pp_layers:
                return ()
            # Every layer gets the same buffers (the first one's cursor mirror is used):
            # uniform layers keep V2 coalescing them as it does the states. V2 lays a role's
            # pages at the declared size (times its scale): the blocks' bytes, padded.
            configs = [buffer_config(role=self._roles[name], size=page_bytes(block, dtype))
                       for name, (block, dtype) in self._layout(context).items()]
            configs.append(buffer_config(role=self._roles["cursor"], size=page_bytes((CURSOR_BLOCK,), torch.int32)))
            return tuple(configs)

        def bind(self, context, manager) -> None:
            layers = list(context.mamba_pp_layers)
            if not layers:
                return
            local = manager.layer_offsets
            rings = {name: [page_view(manager, local[layer], self._roles[name], block, dtype) for layer in layers]
                     for name, (block, dtype) in self._layout(context).items()}
            for views in rings.values():  # pool pages come uninitialised; rings start as zeros
                for view in views:
                    view.zero_()
            mirror = page_view(manager, local[layers[0]], self._roles["cursor"], (CURSOR_BLOCK,), torch.int32)
            self.states = [manager.get_ssm_states(layer) for layer in layers]
            route = "output_only" if self.opts.route == "auto" else self.opts.route
            self.replay = ReplaySlots(ring_geometry(context, self.family, self.gdn_order), len(layers),
                                      context.slot_capacity, self.opts.buffer_len, act_dtype=context.conv_state_dtype,
                                      state_dtype=context.ssm_state_dtype,
                                      device=self.states[0].device, route=route, spec=self.spec,
                                      gdn_pool_order=self.gdn_order or "HV,V,K", rings=rings, cursor_mirror=mirror)
            self.registry.register_layers(self.states, self.replay)

        def reset_slots(self, slots: torch.Tensor, host_slots) -> None:
            if self.replay is not None:
                self.replay.on_slots_assigned(slots.to(torch.int32))

        def on_state_transfer_complete(self, request_ids, manager) -> None:
            if self.replay is not None and request_ids:
                self.reset_slots(torch.as_tensor(manager.get_state_indices(list(request_ids)),
                                                 device=self.replay.write_pos.device), None)

        def after_prepare(self, manager, scheduled_batch) -> None:
            """After the manager set this step's slots: cursors of moved requests back from
            their mirrors; GDN mixed batches fold their decode rows."""
            ctx = list(scheduled_batch.context_requests)
            gen = list(scheduled_batch.generation_requests)
            if self.replay is None or not (ctx or gen):
                return
            requests = ctx + gen
            # The whole batch in its order, so the manager's dummy-row mask comes out as it set it.
            slots = manager.get_state_indices([r.py_request_id for r in requests])
            device = self.replay.write_pos.device
            gen_ids, gen_slots = [r.py_request_id for r in gen], slots[len(ctx):]
            moved = [s for rid, s in zip(gen_ids, gen_slots) if self._slot_of.get(rid, s) != s]
            if moved:
                self.replay.restore_cursors(torch.tensor(moved, dtype=torch.int32, device=device))
            if self.family == "gdn" and ctx and gen and self.spec is None:  # (verify rows do not go through chunks)
                self.replay.make_exact(self.states, torch.tensor(gen_slots, dtype=torch.int32, device=device))
            self._slot_of.update(zip([r.py_request_id for r in requests], slots))

        def before_free(self, manager, request) -> None:
            """A page the manager may commit for prefix reuse must hold the exact state. (The
            main of 2026 commits recurrent pages up to the prompt only, before any decode
            step: this is insurance, one fold per finished request with block reuse on.
            Verify rings are not folded: their history is short and never committed.)"""
            slot = self._slot_of.pop(request.py_request_id, None)
            if (self.replay is not None and self.spec is None and slot is not None
                    and getattr(manager, "enable_block_reuse", False)):
                self.replay.make_exact(self.states, torch.tensor([slot], dtype=torch.int32,
                                                                 device=self.replay.write_pos.device))

        def iter_buffers(self):
            return ()

        def shutdown(self) -> None:
            if self.replay is not None:
                self.registry.unregister(self.replay)
            self.replay, self.states = None, []

    ReplaySSMRings.__qualname__ = ReplaySSMRings.__name__ = "ReplaySSMRings"
    return ReplaySSMRings


def make_strategy_class(base):
    """``MambaStateUpdateStrategy`` subclass (its base from the installed TensorRT-LLM) for
    speculative decoding with ReplaySSM rings: no intermediate SSM states (the verify
    keeps the drafts in the ring), the per-row conv windows TensorRT-LLM's verify writes,
    and the commit after acceptance."""

    class ReplaySSMVerify(base):
        def __init__(self, num_tokens: int):
            self.T = num_tokens
            self.conv_windows: Optional[torch.Tensor] = None  # (layers, rows, T, conv_dim, d_conv - 1)
            self.conv: List[torch.Tensor] = []
            self.manager = None

        @property
        def key(self) -> str:
            return STRATEGY_KEY

        def bind(self, context, manager) -> None:
            layers, rows = list(context.mamba_pp_layers), context.state_index_capacity
            self.manager, self.conv = manager, [manager.get_conv_states(layer) for layer in layers]
            device = self.conv[0].device if self.conv else torch.device("cuda")
            self.conv_windows = torch.zeros(len(layers), rows, self.T, *context.conv_state_shape,
                                            dtype=context.conv_state_dtype, device=device)
            self._rows = torch.arange(rows, dtype=torch.int32, device=device)
            self._dummy = torch.zeros(rows, dtype=torch.bool, device=device)
            self._dummy_host = torch.zeros(rows, dtype=torch.bool, pin_memory=device.type == "cuda")

        def layer_cache_fields(self, layer_offset: int) -> Dict[str, Optional[torch.Tensor]]:
            return {"intermediate_conv_window": self.conv_windows[layer_offset], "intermediate_ssm": None}

        def _replay(self) -> ReplaySlots:
            return self.manager.get_aux_cache_extension(EXTENSION_KEY).replay

        def reset_slots(self, slots: torch.Tensor, host_slots) -> None:
            self._replay().on_slots_assigned(slots.to(torch.int32))

        def refresh_dummy_request_mask(self, is_dummy) -> None:
            self._dummy_host.zero_()
            self._dummy_host[:len(is_dummy)] = torch.tensor(list(is_dummy), dtype=torch.bool)
            self._dummy.copy_(self._dummy_host, non_blocking=True)

        def dummy_request_mask(self, start: int, end: int) -> torch.Tensor:
            return self._dummy[start:end]

        def source_state_indices(self, count: int) -> torch.Tensor:
            return self._rows[:count]

        def update(self, batch, manager) -> bool:
            """Inside the captured step: the accepted token's conv window into each layer's
            conv state, and the cursors moved by the accepted counts (dummy rows: 0)."""
            if batch.num_generations == 0:
                return True
            dummy = batch.is_dummy_request
            src, dst = batch.source_state_indices.long(), batch.destination_state_indices.long()
            pos = batch.accepted_positions.long().clamp(0, self.T - 1)
            for windows, conv in zip(self.conv_windows, self.conv):
                accepted = windows[src, pos]
                conv[dst] = accepted if dummy is None else torch.where(dummy[:, None, None], conv[dst], accepted)
            counts = batch.num_accepted_tokens.to(torch.int32)
            if dummy is not None:
                counts = torch.where(dummy, torch.zeros_like(counts), counts)
            self._replay().commit(counts, batch.destination_state_indices.to(torch.int32))
            return True

        def iter_buffers(self):
            return () if self.conv_windows is None else (self.conv_windows,)

        def shutdown(self, manager=None) -> None:
            self.conv_windows, self.conv, self.manager = None, [], None

    ReplaySSMVerify.__qualname__ = ReplaySSMVerify.__name__ = "ReplaySSMVerify"
    return ReplaySSMVerify


def make_estimator(opts: ReplayOptions, family: str):
    """``register_mamba_aux_cache_estimator``'s callable: this rank's ReplaySSM bytes per
    recurrent slot, from the model's Hugging Face config (what the executor sizes the
    cache with before any manager exists)."""

    def estimate(model_config, params=None, mapping=None, *, spec_config=None, **_) -> int:
        cfg = getattr(model_config, "pretrained_config", None)
        if cfg is None:
            return 0
        try:
            m = from_hf_config(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg)))
        except (KeyError, ValueError):
            return 0
        if m.family != family:
            return 0
        tp = 1 if mapping is None or getattr(mapping, "enable_attention_dp", False) else mapping.tp_size
        pp = 1 if mapping is None else mapping.pp_size
        g = m.geom
        if family == "mamba2":
            local = Mamba2Geometry(g.nheads // tp, g.headdim, g.dstate, max(1, g.ngroups // tp))
        else:
            local = GDNGeometry(g.num_k_heads // tp, g.num_v_heads // tp, g.head_k_dim, g.head_v_dim)
        act = getattr(cfg, "torch_dtype", None)
        act = act if isinstance(act, torch.dtype) else torch.bfloat16
        layers = -(-m.num_ssm_layers // pp)
        spec = spec_sizes(spec_config, opts)
        ring_len = opts.buffer_len if spec is None else ring_capacity(*spec)
        return layers * (ring_bytes_per_slot(local, ring_len, act) + page_bytes((CURSOR_BLOCK,), torch.int32))

    return estimate


MANAGER_METHODS = ("prepare_resources", "free_resources", "get_state_indices", "get_ssm_states",
                   "get_conv_states", "get_aux_cache_extension", "_get_state_buffer", "update_mamba_states")


GDN_MIXER = "tensorrt_llm._torch.modules.mamba.gdn_mixer"
GDN_VERIFY = ("fused_recurrent_gated_delta_rule_update", "Qwen3NextGatedDeltaNet")  # speculative GDN patches these


def missing_features(manager_cls, opts: ReplayOptions) -> List[str]:
    """What :func:`extend` needs of the V2 manager (and, for GDN speculative decoding, of
    the GDN layer module), absent from this install."""
    missing = [m for m in MANAGER_METHODS if not hasattr(manager_cls, m)]
    if opts.speculative and opts.families[0] == "gdn":
        gdn = importlib.import_module(GDN_MIXER)
        missing += [f"{GDN_MIXER}.{name}" for name in GDN_VERIFY if not hasattr(gdn, name)]
        layer = getattr(gdn, GDN_VERIFY[1], None)
        missing += [f"{GDN_VERIFY[1]}.{m}" for m in ("forward_decode", "forward_extend")
                    if layer is not None and not hasattr(layer, m)]
    params = inspect.signature(manager_cls.__init__).parameters
    missing += [f"__init__({name}=...)" for name in ("aux_cache_extensions", "state_update_strategy")
                if name not in params]
    return missing


def extend(manager_cls, opts: ReplayOptions, registry: StateRegistry, gdn_order: Optional[str]) -> List[str]:
    """Install the extension on the V2 manager, register its memory estimator and refuse
    the V1 managers; returns what was patched."""
    kv = importlib.import_module(KV_MAMBA)
    family = opts.families[0]
    v2 = importlib.import_module(KV_V2)
    extension_cls = make_extension_class(kv.MambaAuxCacheExtension, v2.BufferConfig, v2.DataRole)
    strategy_cls = make_strategy_class(kv.MambaStateUpdateStrategy) if opts.speculative else None
    init, prepare, free = manager_cls.__init__, manager_cls.prepare_resources, manager_cls.free_resources

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        spec = spec_sizes(kwargs.get("spec_config"), opts)
        extensions = tuple(kwargs.pop("aux_cache_extensions", ()))
        kwargs["aux_cache_extensions"] = (*extensions, extension_cls(opts, family, gdn_order, registry, spec))
        if spec is not None:
            if kwargs.get("state_update_strategy") is not None:
                raise UnsupportedTensorRTLLM("ReplaySSM's speculative path replaces the manager's state-update "
                                             "strategy, and another one was given")
            kwargs["state_update_strategy"] = strategy_cls(spec[0])
            kwargs["use_replay_state_update"] = False  # ReplaySSM's rings replace TensorRT-LLM's replay history
        init(self, *args, **kwargs)

    @functools.wraps(prepare)
    def prepare_resources(self, scheduled_batch, *args, **kwargs):
        out = prepare(self, scheduled_batch, *args, **kwargs)
        ext = self.get_aux_cache_extension(EXTENSION_KEY)
        if ext is not None:
            ext.after_prepare(self, scheduled_batch)
        return out

    @functools.wraps(free)
    def free_resources(self, request, *args, **kwargs):
        ext = self.get_aux_cache_extension(EXTENSION_KEY)
        if ext is not None:
            ext.before_free(self, request)
        return free(self, request, *args, **kwargs)

    manager_cls.__init__, manager_cls.prepare_resources, manager_cls.free_resources = (
        __init__, prepare_resources, free_resources)
    patched = [f"{KV_MAMBA}.MambaHybridCacheManagerV2"]
    for name in LEGACY_MANAGERS:
        legacy = getattr(kv, name, None)
        if legacy is not None:
            legacy.__init__ = _refusing_init(legacy.__init__, name)
            patched.append(f"{KV_MAMBA}.{name} (refuses)")
    importlib.import_module(f"{KV_MAMBA}.common").register_mamba_aux_cache_estimator(
        EXTENSION_KEY, make_estimator(opts, family))
    if opts.speculative and family == "gdn":
        patched += patch_gdn_verify(registry)
    return patched


def patch_gdn_verify(registry: StateRegistry) -> List[str]:
    """Main's GDN verify gathers the states into a copy before its kernel call, so the
    layer's verify (``forward_decode`` / ``forward_extend`` with ``is_target_verify``)
    opens a :class:`GDNVerifyScope` naming the pool, the slots and the raw gates, and the
    kernel entry is replaced by one that runs ReplaySSM's verify in that scope."""
    gdn = importlib.import_module(GDN_MIXER)
    scope = GDNVerifyScope()
    gdn.fused_recurrent_gated_delta_rule_update = make_gdn_verify_update(gdn.fused_recurrent_gated_delta_rule_update,
                                                                         registry, scope)
    layer_cls = getattr(gdn, GDN_VERIFY[1])

    def scoped(forward, verify_call):
        """``forward`` run inside the scope of ``verify_call(layer, ssm_states, kwargs)``
        (None: no verify rows in this call)."""

        @functools.wraps(forward)
        def wrapped(self, conv_states, ssm_states, *args, is_target_verify=False, **kwargs):
            call = verify_call(self, ssm_states, kwargs) if is_target_verify else None
            if call is None:
                return forward(self, conv_states, ssm_states, *args, is_target_verify=is_target_verify, **kwargs)
            with scope.active(call):
                return forward(self, conv_states, ssm_states, *args, is_target_verify=is_target_verify, **kwargs)

        return wrapped

    def decode_call(layer, ssm_states, kw):
        return GDNVerifyCall(ssm_states, kw["cache_indices"][:kw["num_decodes"]], kw["a"], kw["b"], layer.A_log,
                             layer.dt_bias)

    def extend_call(layer, ssm_states, kw):
        if kw.get("num_decode_tokens", 0) == 0:
            return None
        p = kw["num_prefill_tokens"]
        return GDNVerifyCall(ssm_states, kw["state_indices_d"], kw["a"][p:], kw["b"][p:], layer.A_log, layer.dt_bias)

    layer_cls.forward_decode = scoped(layer_cls.forward_decode, decode_call)
    layer_cls.forward_extend = scoped(layer_cls.forward_extend, extend_call)
    return [f"{GDN_MIXER}.{GDN_VERIFY[0]}", f"{GDN_MIXER}.{GDN_VERIFY[1]}.forward_decode / forward_extend"]


def _refusing_init(init, name: str):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        raise UnsupportedTensorRTLLM(
            f"ReplaySSM needs the Mamba cache manager on KV cache manager V2 (its rings are V2 pool buffers); "
            f"{name} is the deprecated V1 path. Set kv_cache_config.use_kv_cache_manager_v2: true (and leave "
            "TRTLLM_USE_PY_MAMBA unset), or unset TRTLLM_REPLAYSSM.")

    return __init__
