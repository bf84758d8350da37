"""What the ahead-of-time build compiles: every kernel specialisation the supported models
launch, found by running the package's own Python entry points on ``meta`` tensors with
a recorder in place of the launch (:func:`~trtllm_replayssm.ops.launch.launch_kernel`).

So the AOT build and the JIT path share one launch decision (grid, constexprs, warps,
configs from the tuned table): a spec here is exactly what the wrapper would hand to
Triton. A :class:`KernelSpec` is one compile (kernel, constexprs, warps, argument types
and divisibility hints); a :class:`OpCase` is one C-ABI call shape (op, dtypes, flags,
geometry, batch point) and the launches it makes, in order.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..cache import gdn_ring_dtype
from ..models import GDN_MODELS, MAMBA2_MODELS
from ..ops.launch import (BATCH_POINTS, config_kernel, nearest_batch_point, pop_launcher, push_launcher,
                          recording_for_arch, select_config, tag_arch)
from ..ops.streams import launching_on_side_stream

META = torch.device("meta")
DEFAULT_BUFFER_LENS = (16,)

_DTYPE_SIG = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int32: "i32",
              torch.int64: "i64", torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}
DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)
    return f"{fn.__module__}.{fn.__qualname__}"


def arg_type(value) -> str:
    """Triton signature type of a runtime argument."""
    if isinstance(value, torch.Tensor):
        return "*" + _DTYPE_SIG[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no AOT signature type for {type(value).__name__}")


def divisible_by_16(value) -> bool:
    """The hint a spec carries for an argument (checked again at every AOT launch):
    pointers are assumed 16-byte aligned, integers only where the recorded value was."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and value != 0 and value % 16 == 0


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # Triton signature type: *bf16, i32, fp32, ...
    div16: bool


@dataclass(frozen=True)
class KernelSpec:
    """One compile of one kernel."""

    kernel: str  # module.qualname of the @triton.jit function
    constexprs: Tuple[Tuple[str, object], ...]
    num_warps: int
    params: Tuple[Param, ...]  # the runtime arguments, in declaration order
    maxnreg: Optional[int] = None  # ptxas's cap on registers a thread (None: its choice)
    # Launched as a programmatic dependent launch of the launch before it (Triton's
    # ``launch_pdl``; the C library sets CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION).
    programmatic: bool = False

    @property
    def key(self) -> str:
        """Stable name of the specialisation (what the manifest, the C table and the
        Python AOT backend look a launch up by)."""
        return _spec_key(self)


@lru_cache(maxsize=None)
def _spec_key(spec: KernelSpec) -> str:
    # Cached: the AOT backend asks for the key of every launch, mostly of the same few specs.
    body = json.dumps([spec.kernel, list(spec.constexprs), spec.num_warps,
                       [(p.name, p.type, p.div16) for p in spec.params]]
                      + ([spec.maxnreg] if spec.maxnreg else []) + (["programmatic"] if spec.programmatic else []),
                      default=str)
    short = spec.kernel.rsplit(".", 1)[-1].strip("_")
    return f"{short}_{hashlib.sha1(body.encode()).hexdigest()[:12]}"


def spec_of(kernel, kwargs: dict) -> KernelSpec:
    """The specialisation a launch of ``kernel`` with ``kwargs`` needs."""
    constexprs, params = [], []
    for p in kernel.params:
        if p.name not in kwargs:
            if p.is_constexpr and p.has_default:  # a default the call kept
                constexprs.append((p.name, p.default))
            continue
        v = kwargs[p.name]
        if p.is_constexpr:
            constexprs.append((p.name, v))
        else:
            params.append(Param(p.name, arg_type(v), divisible_by_16(v) and not p.do_not_specialize))
    return KernelSpec(kernel_name(kernel), tuple(constexprs), int(kwargs.get("num_warps", 4)), tuple(params),
                      kwargs.get("maxnreg"), bool(kwargs.get("launch_pdl", False)))


@dataclass
class RecordedLaunch:
    kernel: object
    grid: Tuple[int, ...]
    kwargs: dict
    side_stream: bool = False  # made on the side stream (ops.streams)


class Recorder:
    """Records launches instead of running them (``with Recorder() as rec: ...``)."""

    programmatic_launches = True  # (ops.launch: the AOT library carries them)

    def __init__(self):
        self.launches: List[RecordedLaunch] = []

    def __call__(self, kernel, grid, kwargs) -> bool:
        self.launches.append(RecordedLaunch(kernel, grid, dict(kwargs), launching_on_side_stream()))
        return True

    def __enter__(self) -> "Recorder":
        push_launcher(self)
        return self

    def __exit__(self, *exc) -> None:
        pop_launcher(self)


@dataclass
class OpCase:
    """One call shape of a C-ABI op and the kernel launches it makes."""

    op: str
    key: Dict[str, object]
    batch: int
    launches: List[Tuple[KernelSpec, Tuple[int, ...]]] = field(default_factory=list)
    # Indices of the launches made on a side stream, forked from the caller's stream before
    # the first of them and joined back after the case's last launch (ops.streams).
    side_launches: List[int] = field(default_factory=list)
    # Built for its kernels only (the AOT backend's exact lookups), not a case of the C
    # library (whose nearest batch point it would move).
    kernels_only: bool = False

    def key_string(self) -> str:
        return "|".join([self.op] + [f"{k}={v}" for k, v in sorted(self.key.items())])


def _mamba2_meta_inputs(geom, act_dtype, lead: Tuple[int, ...], has_z: bool) -> dict:
    """A Mamba2 step's inputs on ``meta`` in TensorRT-LLM's layout: tokens ``(*lead, ...)``
    (``(B,)`` for a decode step, ``(B, T)`` for a verify), dt expanded along headdim, A, D and
    dt_bias tied (stride 0), softplus on."""
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    kw = dict(device=META)
    x = torch.empty(*lead, H, P, dtype=act_dtype, **kw)
    return dict(x=x, dt=torch.empty(*lead, H, dtype=act_dtype, **kw)[..., None].expand(*lead, H, P),
                A=torch.empty(H, **kw)[:, None, None].expand(H, P, N),
                B=torch.empty(*lead, G, N, dtype=act_dtype, **kw), C=torch.empty(*lead, G, N, dtype=act_dtype, **kw),
                D=torch.empty(H, **kw)[:, None].expand(H, P), z=torch.empty_like(x) if has_z else None,
                dt_bias=torch.empty(H, **kw)[:, None].expand(H, P), dt_softplus=True, out=torch.empty_like(x))


def _mamba2_calls(geom, state_dtype, act_dtype, batch, L, has_z, force_flush, route, arch):
    """Meta tensors for one Mamba2 step in TensorRT-LLM's layout; returns a thunk that calls
    the entry point with configs taken from ``arch``'s tuned table."""
    from ..cache import Mamba2ReplayCache
    from ..ops.mamba2 import selective_state_update, selective_state_update_replayssm

    P, N = geom.headdim, geom.dstate
    step = dict(_mamba2_meta_inputs(geom, act_dtype, (batch,), has_z),
                state_batch_indices=torch.empty(batch, dtype=torch.int32, device=META), pad_slot_id=-1)
    cache = Mamba2ReplayCache(geom, 1, batch + 1, L, state_dtype, act_dtype, META)

    def cfg(kernel):
        return select_config(kernel, arch, state_dtype, act_dtype, P, N, batch, nheads=geom.nheads)

    if route == "standard":
        return lambda: selective_state_update(cache.ssm_state[0], **step, config=cfg("standard"))
    ff = torch.empty(batch, dtype=torch.int8, device=META) if force_flush else None
    main = cfg(config_kernel(route))
    return lambda: selective_state_update_replayssm(cache.ssm_state[0], **step, force_flush=ff, route=route,
                                                    config=main, fold_config=cfg("fold"), **cache.ring_kwargs(0))


def _gdn_calls(geom, state_dtype, act_dtype, batch, L, force_flush, route, arch):
    """As :func:`_mamba2_calls`, on rings of the state dtype's ring dtype (``gdn_ring_dtype``)."""
    from ..cache import GDNReplayCache
    from ..ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update

    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    kw = dict(device=META)
    step = dict(q=torch.empty(batch, H, K, dtype=act_dtype, **kw), k=torch.empty(batch, H, K, dtype=act_dtype, **kw),
                v=torch.empty(batch, HV, V, dtype=act_dtype, **kw), a=torch.empty(batch, HV, dtype=act_dtype, **kw),
                b=torch.empty(batch, HV, dtype=act_dtype, **kw), A_log=torch.empty(HV, **kw),
                dt_bias=torch.empty(HV, **kw), initial_state_indices=torch.empty(batch, dtype=torch.int32, **kw),
                out=torch.empty(batch, HV, V, dtype=act_dtype, **kw))
    cache = GDNReplayCache(geom, 1, batch + 1, L, state_dtype, device=META)

    def cfg(kernel):
        return select_config(kernel, arch, state_dtype, act_dtype, V, K, batch, family="gdn", nheads=HV)

    if route == "standard":
        return lambda: fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **step, config=cfg("standard"))
    ff = torch.empty(batch, dtype=torch.int8, **kw) if force_flush else None
    main = cfg(config_kernel(route))
    return lambda: fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **step, force_flush=ff, route=route,
                                                              config=main, fold_config=cfg("fold"),
                                                              **cache.ring_kwargs(0))


def _cursor_calls(op, batch, force_flush, flush_all, L):
    from ..ops.cursors import advance_write_pos, reset_write_pos

    write_pos = torch.empty(batch + 1, dtype=torch.int32, device=META)
    slots = torch.empty(batch, dtype=torch.int32, device=META)
    if op == "reset_write_pos":
        return lambda: reset_write_pos(write_pos, slots)
    ff = torch.empty(batch, dtype=torch.int8, device=META) if force_flush else None
    return lambda: advance_write_pos(write_pos, L, slots, ff, flush_all=flush_all)


def _spec_calls(family, geom, state_dtype, act_dtype, batch, T, history_len, has_z, config=None):
    """One speculative verify (``T`` tokens per row) with the default launch config (or ``config``)."""
    from ..cache import GDNReplayCache, Mamba2ReplayCache
    from ..ops.gdn.spec import gdn_replayssm_spec_decode
    from ..ops.mamba2.spec import ring_capacity, selective_state_update_replayssm_spec

    kw = dict(device=META)
    buf = ring_capacity(T, history_len)
    cursors = dict(write_pos=torch.empty(batch + 1, dtype=torch.int32, **kw),
                   origin=torch.empty(batch + 1, dtype=torch.int32, **kw),
                   is_flush=torch.empty(batch + 1, dtype=torch.int8, **kw), history_len=history_len)
    slots = torch.empty(batch, dtype=torch.int32, **kw)
    if family == "mamba2":
        cache = Mamba2ReplayCache(geom, 1, batch + 1, buf, state_dtype, act_dtype, META)
        step = _mamba2_meta_inputs(geom, act_dtype, (batch, T), has_z)
        return lambda: selective_state_update_replayssm_spec(
            cache.ssm_state[0], **step, state_batch_indices=slots, x_ring=cache.x_cache[0], dt_ring=cache.dt_cache[0],
            B_ring=cache.B_cache[0], **cursors, config=config)
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    cache = GDNReplayCache(geom, 1, batch + 1, buf, state_dtype, gdn_ring_dtype(state_dtype, speculative=True),
                           device=META)
    qk = [torch.empty(batch, T, H, K, dtype=act_dtype, **kw) for _ in range(2)]
    v = torch.empty(batch, T, HV, V, dtype=act_dtype, **kw)
    ab = [torch.empty(batch, T, HV, dtype=act_dtype, **kw) for _ in range(2)]
    return lambda: gdn_replayssm_spec_decode(
        cache.ssm_state[0], *qk, v, *ab, torch.empty(HV, **kw), torch.empty(HV, **kw), initial_state_indices=slots,
        out=torch.empty_like(v), d_ring=cache.d_cache[0], k_ring=cache.k_cache[0], g_ring=cache.g_cache[0], **cursors,
        config=config)


def _mamba2_spec_batches(geom, state_dtype, act_dtype, T, has_z) -> Tuple[List[int], List[int]]:
    """Batch points of a Mamba2 verify's cases, and batches recorded for their kernels only.
    The launch of the flush rows takes a row block that grows with the batch
    (``flush_row_block``) under each default config (``ops/mamba2/spec.py``,
    ``SPEC_PLANS``); the JIT path (and the AOT backend, which looks its kernels up exactly)
    needs each (config, row block)'s kernel. The C library takes the case at the nearest
    point in log scale: the points are each config's, and a batch of a row block where it
    keeps every batch's nearest point of the config the JIT path takes there; the other
    row blocks are built for their kernels only."""
    from ..ops.mamba2 import spec as m2_spec

    flush_phases = [p.value for split in m2_spec.PHASES.values() for p in split if m2_spec.serves_flush_rows_alone(p)]
    other = []
    for point in m2_spec.SPEC_PLANS:  # (programs along the other grid axes do not change with the batch)
        with Recorder() as rec:
            _spec_calls("mamba2", geom, state_dtype, act_dtype, point, T, SPEC_HISTORY, has_z)()
        grids = [launch.grid for launch in rec.launches if launch.kwargs.get("PHASE") in flush_phases]
        other.append(grids[0][0] * grids[0][1] if grids else None)  # (None: no launch of the flush rows alone)
    return _plan_and_row_block_points(tuple(other))


@lru_cache(maxsize=None)
def _plan_and_row_block_points(other: Tuple[Optional[int], ...]) -> Tuple[List[int], List[int]]:
    """:func:`_mamba2_spec_batches` given the flush rows' launch's programs along its other
    grid axes under each default config (None: no such launch)."""
    from ..ops.mamba2 import spec as m2_spec

    plan_points = tuple(m2_spec.SPEC_PLANS)
    other_of = dict(zip(plan_points, other))
    groups: Dict[tuple, List[int]] = {}  # (config's point, row block) -> [first batch, last batch]
    for batch in range(1, m2_spec.FLUSH_ROW_BLOCK * m2_spec.FLUSH_MIN_PROGRAMS + 2):
        point = nearest_batch_point(plan_points, batch)
        rows = None if other_of[point] is None else m2_spec.flush_row_block(other_of[point], batch)
        groups.setdefault((point, rows), [batch, batch])[1] = batch
        if point == plan_points[-1] and rows in (None, m2_spec.FLUSH_ROW_BLOCK):
            break  # (the last config's last row block: open-ended, its first batch stands for it)

    def keeps_configs(points) -> bool:
        ordered = sorted(points)
        for lo, hi in zip(ordered, ordered[1:]):
            for batch in range(lo, hi + 1):
                if m2_spec.spec_config(nearest_batch_point((lo, hi), batch)) != m2_spec.spec_config(batch):
                    return False
        return True

    points, kernels_only = set(plan_points), []
    for (point, rows), (first, last) in groups.items():
        if any(first <= p <= last for p in points):
            continue
        middle = (math.log2(first) + math.log2(last)) / 2  # (the group's batches nearest its middle first)
        for batch in sorted(range(first, last + 1), key=lambda b: abs(math.log2(b) - middle)):
            if keeps_configs(points | {batch}):
                points.add(batch)
                break
        else:
            kernels_only.append(first)
    return sorted(points), kernels_only


def _spec_cursor_calls(op, T, history_len):
    from ..ops.mamba2.spec import commit_replayssm_spec, reset_replayssm_spec_cursors

    c = [torch.empty(2, dtype=torch.int32, device=META), torch.empty(2, dtype=torch.int32, device=META),
         torch.empty(2, dtype=torch.int8, device=META)]
    rows = torch.empty(1, dtype=torch.int32, device=META)
    if op == "commit_spec":
        return lambda: commit_replayssm_spec(*c, rows, T, history_len, rows)
    return lambda: reset_replayssm_spec_cursors(*c, rows, T, history_len)


def pdl_flip_batches(points: Sequence[int], heads: int, max_head_rows: int) -> List[int]:
    """The batch, if any, served from a batch point (the nearest in log scale: the tuned
    table's entry, the C library's case) but launched otherwise than that point as to
    programmatic dependent launch, which applies while batch x ``heads`` <= ``max_head_rows``
    (:func:`~trtllm_replayssm.ops.launch.programmatic_launch_allowed`). The decision is
    monotone in the batch, so a point's batches take both forms only across ``last``, the
    largest batch with PDL, and one batch of the other form stands for them all. Recorded
    for its kernels only, so that the AOT backend finds a kernel at every batch."""
    last = max_head_rows // heads
    if last < 1:
        return []
    point = nearest_batch_point(points, last)
    if nearest_batch_point(points, last + 1) != point:
        return []
    return [last + 1 if point <= last else last]


STEP_ROUTES = ("output_only", "standard_step", "always_flush", "standard")
SPEC_TOKENS = (2, 3, 4, 6)  # T = 1 + drafts (MTP with 1-3 drafts, and 5)
SPEC_HISTORY = 16


def op_cases(arch: str, buffer_lens: Sequence[int] = DEFAULT_BUFFER_LENS,
             state_dtypes: Sequence[str] = ("fp32", "bf16"), act_dtypes: Sequence[str] = ("bf16",),
             batches: Sequence[int] = BATCH_POINTS, spec_tokens: Sequence[int] = SPEC_TOKENS) -> List[OpCase]:
    """Every call shape the supported models make (TensorRT-LLM's layouts: D, dt_bias,
    softplus and slot indices on; z and force-flush both ways), at every batch point; the
    speculative verify for each ``T`` of ``spec_tokens`` (history 16) and its cursor ops."""
    from ..ops.gdn.spec import GDN_SPEC_PDL, GDN_SPEC_PDL_MAX_HEAD_ROWS, gdn_spec_batches
    from ..ops.launch import FOLD_PDL, FOLD_PDL_MAX_HEAD_ROWS

    cases: List[OpCase] = []
    capability = int(tag_arch(arch).replace("sm_", "").replace("sm", ""))

    def add(op, key, batch, thunk, kernels_only=False):
        # (as launched on such a GPU: programmatic dependent launches on sm_90+)
        with Recorder() as rec, recording_for_arch(capability):
            thunk()
        case = OpCase(op, key, batch, kernels_only=kernels_only)
        for i, launch in enumerate(rec.launches):
            case.launches.append((spec_of(launch.kernel, launch.kwargs), launch.grid))
            if launch.side_stream:
                case.side_launches.append(i)
        cases.append(case)

    def pdl_flips(points, point, heads, enabled, max_head_rows) -> List[int]:
        """The batch served from ``point`` whose launches differ from it in PDL (if any)."""
        if capability < 90 or not enabled:
            return []
        return [b for b in pdl_flip_batches(points, heads, max_head_rows) if nearest_batch_point(points, b) == point]

    # Every model's geometry, head counts included: the tuned table's configs and the
    # kernels' heads a program depend on them, so two models that share a head shape
    # (Qwen3.5-4B and -122B) get cases of their own (the C library's keys carry them too).
    mamba2_geoms = {(m.geom.headdim, m.geom.dstate, m.geom.nheads, m.geom.ngroups): m.geom
                    for m in MAMBA2_MODELS.values()}
    gdn_geoms = {(m.geom.head_v_dim, m.geom.head_k_dim, m.geom.num_v_heads, m.geom.num_k_heads): m.geom
                 for m in GDN_MODELS.values()}
    for sd in state_dtypes:
        for ad in act_dtypes:
            s, a = DTYPE_NAMES[sd], DTYPE_NAMES[ad]
            for L in buffer_lens:
                for b in batches:
                    for (P, N, H, G), g in sorted(mamba2_geoms.items()):
                        for route in STEP_ROUTES:
                            for has_z in (False, True):
                                for ff in ((False,) if route == "standard" else (False, True)):
                                    key = dict(state=sd, act=ad, P=P, N=N, H=H, G=G,
                                               L=L if route != "standard" else 0, route=route, z=int(has_z),
                                               ff=int(ff))
                                    add("mamba2_step", key, b, _mamba2_calls(g, s, a, b, L, has_z, ff, route, arch))
                                    for f in (pdl_flips(batches, b, H, FOLD_PDL, FOLD_PDL_MAX_HEAD_ROWS["mamba2"])
                                              if route == "output_only" else ()):
                                        add("mamba2_step", key, f,
                                            _mamba2_calls(g, s, a, f, L, has_z, ff, route, arch), kernels_only=True)
                    for (V, K, HV, H), g in sorted(gdn_geoms.items()):
                        for route in STEP_ROUTES:
                            for ff in ((False,) if route == "standard" else (False, True)):
                                key = dict(state=sd, act=ad, V=V, K=K, HV=HV, H=H,
                                           L=L if route != "standard" else 0, route=route, ff=int(ff),
                                           ring=_DTYPE_SIG[gdn_ring_dtype(s)] if route != "standard" else "none")
                                add("gdn_step", key, b, _gdn_calls(g, s, a, b, L, ff, route, arch))
                                for f in (pdl_flips(batches, b, HV, FOLD_PDL, FOLD_PDL_MAX_HEAD_ROWS["gdn"])
                                          if route == "output_only" else ()):
                                    add("gdn_step", key, f, _gdn_calls(g, s, a, f, L, ff, route, arch),
                                        kernels_only=True)
    # Speculative verify (Mamba2: a case per flush row block; GDN: a case per batch point
    # of its plans, split_fold and register caps) and its cursor ops.
    for T in spec_tokens:
        for sd in state_dtypes:
            for ad in act_dtypes:
                s, a = DTYPE_NAMES[sd], DTYPE_NAMES[ad]
                for (P, N, H, G), g in sorted(mamba2_geoms.items()):
                    for has_z in (False, True):
                        points, kernels_only = _mamba2_spec_batches(g, s, a, T, has_z)
                        for b in points + kernels_only:
                            add("mamba2_spec", dict(state=sd, act=ad, P=P, N=N, H=H, G=G, T=T, Bh=SPEC_HISTORY,
                                                    z=int(has_z)), b,
                                _spec_calls("mamba2", g, s, a, b, T, SPEC_HISTORY, has_z), b in kernels_only)
                for (V, K, HV, H), g in sorted(gdn_geoms.items()):
                    points = gdn_spec_batches()
                    for b in points:
                        key = dict(state=sd, act=ad, V=V, K=K, HV=HV, H=H, T=T, Bh=SPEC_HISTORY)
                        add("gdn_spec", key, b, _spec_calls("gdn", g, s, a, b, T, SPEC_HISTORY, False))
                        for f in pdl_flips(points, b, HV, GDN_SPEC_PDL, GDN_SPEC_PDL_MAX_HEAD_ROWS):
                            add("gdn_spec", key, f, _spec_calls("gdn", g, s, a, f, T, SPEC_HISTORY, False),
                                kernels_only=True)
        for op in ("commit_spec", "reset_spec"):
            add(op, dict(T=T, Bh=SPEC_HISTORY), 1, _spec_cursor_calls(op, T, SPEC_HISTORY))
    for L in buffer_lens:
        for ff in (False, True):
            for flush_all in (False, True):
                add("advance_write_pos", dict(L=L, ff=int(ff), flush_all=int(flush_all)), 1,
                    _cursor_calls("advance_write_pos", 1, ff, flush_all, L))
    add("reset_write_pos", {}, 1, _cursor_calls("reset_write_pos", 1, False, False, 0))
    return cases


def unique_specs(cases: Iterable[OpCase]) -> Dict[str, KernelSpec]:
    specs: Dict[str, KernelSpec] = {}
    for case in cases:
        for spec, _ in case.launches:
            specs.setdefault(spec.key, spec)
    return specs


def find_kernel(name: str):
    """The @triton.jit function named ``module.qualname``."""
    import importlib

    module, qualname = name.rsplit(".", 1)
    return getattr(importlib.import_module(module), qualname)
