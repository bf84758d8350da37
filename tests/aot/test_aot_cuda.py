"""AOT kernels on the GPU: bit-for-bit equal to the JIT kernels, the C ABI's error codes,
and launches inside a CUDA graph. Real shapes; they run only where CUDA is present."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

import trtllm_replayssm as rs
from trtllm_replayssm.aot.backend import AOTLauncher
from trtllm_replayssm.aot.library import DTYPE_CODES, ROUTE_CODES, GDNStepArgs, KernelLibrary, Mamba2StepArgs
from trtllm_replayssm.cache import GDNReplayCache, Mamba2ReplayCache
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.cursors import FLUSH_EVERY_STEP
from trtllm_replayssm.ops.launch import architecture_tables, launcher_in_front, pop_launcher, push_launcher

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (real shapes)")
L = 16
DT = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True)
def _jit_on_the_librarys_tables():
    """The library holds the kernels of the architectures' tables, so the JIT runs it is
    compared with read those too, not a GPU's own (an H100's: ``tuned/*_sm90_h100_*``)."""
    with architecture_tables():
        yield


@pytest.fixture(scope="module")
def lib(kernel_library):
    return KernelLibrary(kernel_library)


@pytest.fixture
def aot(lib):
    launcher = AOTLauncher(lib, strict=True)
    with launcher_in_front(launcher):
        yield launcher


def _mamba2_setup(batch, state_dtype, route, seed=0):
    g = model("nemotron-3-super").geom
    H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
    torch.manual_seed(seed)
    cache = Mamba2ReplayCache(g, 1, batch + 2, L, state_dtype, torch.bfloat16, "cuda")
    cache.ssm_state.normal_()
    if route in ("output_only", "always_flush"):  # staggered rings
        cache.x_cache.normal_()
        cache.B_cache.normal_()
        cache.dt_cache.uniform_(0.01, 0.1)
        cache.write_pos.copy_(torch.randint(0, L, (batch + 2,), dtype=torch.int32))
    slots = torch.randperm(batch + 2, device="cuda")[:batch].to(torch.int32)
    steps = [dict(x=torch.randn(batch, H, P, device="cuda", dtype=torch.bfloat16),
                  dt=torch.randn(batch, H, device="cuda", dtype=torch.bfloat16)[:, :, None].expand(batch, H, P),
                  B=torch.randn(batch, G, N, device="cuda", dtype=torch.bfloat16),
                  C=torch.randn(batch, G, N, device="cuda", dtype=torch.bfloat16)) for _ in range(L + 3)]
    params = dict(A=(-torch.rand(H, device="cuda") - 0.5)[:, None, None].expand(H, P, N),
                  D=torch.randn(H, device="cuda")[:, None].expand(H, P),
                  dt_bias=torch.randn(H, device="cuda")[:, None].expand(H, P))
    return cache, slots, steps, params


def _mamba2_run(cache, slots, steps, params, route):
    outs = []
    for s in steps:
        out = torch.empty_like(s["x"])
        if route == "standard":
            rs.selective_state_update(cache.ssm_state[0], **s, **params, dt_softplus=True, state_batch_indices=slots,
                                      out=out)
        else:
            rs.selective_state_update_replayssm(cache.ssm_state[0], **s, **params, dt_softplus=True,
                                                state_batch_indices=slots, out=out, route=route,
                                                **cache.ring_kwargs(0))
            cache.advance(slots, route=route)
        outs.append(out)
    return outs


@pytest.mark.parametrize("route", ["output_only", "standard_step", "always_flush", "standard"])
@pytest.mark.parametrize("state", ["fp32", "bf16"])
@pytest.mark.parametrize("batch", [128, 5, 40])
def test_mamba2_aot_equals_jit_bit_for_bit(lib, route, state, batch):
    """Batch 5 takes the library's batch-8 kernels, with the fold as a programmatic
    dependent launch (Super: up to 32 rows); 40 those built for the batches that point 32
    serves without it (``aot/specs.py: pdl_flip_batches``)."""
    runs = {}
    for backend in ("jit", "aot"):
        cache, slots, steps, params = _mamba2_setup(batch, DT[state], route)
        launcher = AOTLauncher(lib, strict=True) if backend == "aot" else None
        with launcher_in_front(launcher):
            runs[backend] = (_mamba2_run(cache, slots, steps, params, route), cache)
        assert launcher is None or launcher.launches > 0
        if launcher is not None:
            assert (launcher.programmatic_launches_made > 0) == (route == "output_only" and batch == 5)
    (o_jit, c_jit), (o_aot, c_aot) = runs["jit"], runs["aot"]
    for t, (a, b) in enumerate(zip(o_jit, o_aot)):
        assert torch.equal(a, b), f"step {t}: outputs differ"
    for name in ("ssm_state", "x_cache", "dt_cache", "B_cache", "write_pos"):
        assert torch.equal(getattr(c_jit, name), getattr(c_aot, name)), name


def _gdn_run(route, state_dtype, batch, use_aot, lib, seed=0):
    g = model("qwen3.5-4b").geom
    H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
    torch.manual_seed(seed)
    cache = GDNReplayCache(g, 1, batch + 2, L, state_dtype, device="cuda")
    cache.ssm_state.normal_(std=0.1)
    slots = torch.randperm(batch + 2, device="cuda")[:batch].to(torch.int32)
    A_log, dt_bias = torch.randn(HV, device="cuda"), torch.randn(HV, device="cuda")
    launcher = AOTLauncher(lib, strict=True) if use_aot else None
    outs = []
    with launcher_in_front(launcher):
        for _ in range(L + 3):
            q, k = (torch.randn(batch, H, K, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            v = torch.randn(batch, HV, V, device="cuda", dtype=torch.bfloat16)
            a, b = (torch.randn(batch, HV, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            out = torch.empty_like(v)
            if route == "standard":
                rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], q, k, v, a, b, A_log, dt_bias,
                                                          initial_state_indices=slots, out=out)
            else:
                rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], q, k, v, a, b, A_log, dt_bias,
                                                              initial_state_indices=slots, out=out, route=route,
                                                              **cache.ring_kwargs(0))
                cache.advance(slots, route=route)
            outs.append(out)
    assert launcher is None or launcher.launches > 0
    return outs, cache


@pytest.mark.parametrize("route", ["output_only", "standard_step", "always_flush", "standard"])
@pytest.mark.parametrize("state", ["fp32", "bf16"])
def test_gdn_aot_equals_jit_bit_for_bit(lib, route, state):
    o_jit, c_jit = _gdn_run(route, DT[state], 32, False, lib)
    o_aot, c_aot = _gdn_run(route, DT[state], 32, True, lib)
    for t, (a, b) in enumerate(zip(o_jit, o_aot)):
        assert torch.equal(a, b), f"step {t}: outputs differ"
    for name in ("ssm_state", "d_cache", "k_cache", "g_cache", "write_pos"):
        assert torch.equal(getattr(c_jit, name), getattr(c_aot, name)), name


def test_programmatic_launches_switched_off_give_the_same_bits(lib):
    """``rs_set_programmatic_launches(0)`` (or TRTLLM_REPLAYSSM_PDL=0) launches the fold
    plainly: the same results, since its wait then returns at once."""
    runs = []
    for programmatic in (True, False):
        previous = lib.set_programmatic_launches(programmatic)
        try:
            cache, slots, steps, params = _mamba2_setup(8, torch.float32, "output_only")
            launcher = AOTLauncher(lib, strict=True)
            with launcher_in_front(launcher):
                runs.append((_mamba2_run(cache, slots, steps, params, "output_only"), cache))
            assert launcher.programmatic_launches_made > 0  # (built so; launched as set)
        finally:
            lib.set_programmatic_launches(previous)
    (o_pdl, c_pdl), (o_plain, c_plain) = runs
    for t, (a, b) in enumerate(zip(o_pdl, o_plain)):
        assert torch.equal(a, b), f"step {t}: outputs differ"
    assert torch.equal(c_pdl.ssm_state, c_plain.ssm_state)


def _c_args(cache, slots, s, params, out, route) -> Mamba2StepArgs:
    a = Mamba2StepArgs()
    st, x, dt = cache.ssm_state[0], s["x"], s["dt"][:, :, 0]
    ring = cache.ring_kwargs(0)
    for name, t in dict(state=st, x=x, dt=dt, A=params["A"][:, 0, 0], B=s["B"], C=s["C"], D=params["D"],
                        dt_bias=params["dt_bias"][:, 0], out=out, slot_idx=slots, x_cache=ring["x_cache"],
                        dt_cache=ring["dt_cache"], B_cache=ring["B_cache"], write_pos=ring["write_pos"]).items():
        setattr(a, name, t.data_ptr())
    g = model("nemotron-3-super").geom
    a.batch, a.num_slots, a.nheads, a.headdim, a.dstate, a.ngroups = x.shape[0], st.shape[0], g.nheads, g.headdim, g.dstate, g.ngroups
    a.buffer_len, a.pad_slot_id, a.dt_softplus = L, -1, 1
    a.stride_state[:] = st.stride()[:3]
    a.stride_x[:] = x.stride()[:2]
    a.stride_dt[:] = dt.stride()
    a.stride_A = params["A"].stride(0)
    a.stride_B[:] = s["B"].stride()[:2]
    a.stride_C[:] = s["C"].stride()[:2]
    a.stride_D[:] = params["D"].stride()
    a.stride_dt_bias = params["dt_bias"].stride(0)
    a.stride_out[:] = out.stride()[:2]
    a.stride_x_cache[:] = ring["x_cache"].stride()[:3]
    a.stride_dt_cache[:] = ring["dt_cache"].stride()[:2]
    a.stride_B_cache[:] = ring["B_cache"].stride()[:3]
    a.state_dtype, a.act_dtype, a.route = DTYPE_CODES["fp32"], DTYPE_CODES["bf16"], ROUTE_CODES[route]
    return a


def test_c_abi_step_equals_jit_and_rejects_bad_calls(lib):
    """rs_mamba2_step (the op the TensorRT plugin calls) over a cycle equals the Python
    entry point on the JIT; bad calls come back as codes, with nothing written."""
    runs = {}
    for path in ("jit", "c"):
        cache, slots, steps, params = _mamba2_setup(128, torch.float32, "output_only", seed=3)
        outs = []
        for s in steps:
            out = torch.empty_like(s["x"])
            if path == "jit":
                rs.selective_state_update_replayssm(cache.ssm_state[0], **s, **params, dt_softplus=True,
                                                    state_batch_indices=slots, out=out, route="output_only",
                                                    **cache.ring_kwargs(0))
                cache.advance(slots)
            else:
                stream = torch.cuda.current_stream().cuda_stream
                lib.check(lib.lib.rs_mamba2_step(ctypes.byref(_c_args(cache, slots, s, params, out, "output_only")),
                                                 ctypes.c_void_p(stream)), "rs_mamba2_step")
                lib.check(lib.lib.rs_advance_write_pos(cache.write_pos.data_ptr(), cache.write_pos.shape[0], L,
                                                       slots.data_ptr(), None, slots.shape[0], -1, 0,
                                                       ctypes.c_void_p(stream)), "rs_advance_write_pos")
            outs.append(out)
        runs[path] = (outs, cache)
    for a, b in zip(runs["jit"][0], runs["c"][0]):
        assert torch.equal(a, b)
    assert torch.equal(runs["jit"][1].ssm_state, runs["c"][1].ssm_state)

    cache, slots, steps, params = _mamba2_setup(8, torch.float32, "output_only", seed=4)
    before = cache.ssm_state.clone()
    out = torch.empty_like(steps[0]["x"])
    args = _c_args(cache, slots, steps[0], params, out, "output_only")
    bad = Mamba2StepArgs.from_buffer_copy(args)
    bad.x = steps[0]["x"].data_ptr() + 2  # one bf16 element off: breaks the 16-byte alignment the build assumed
    assert lib.lib.rs_mamba2_step(ctypes.byref(bad), None) == 7, lib.last_error()
    bad = Mamba2StepArgs.from_buffer_copy(args)
    bad.state_dtype = DTYPE_CODES["fp16"]  # not built
    assert lib.lib.rs_mamba2_step(ctypes.byref(bad), None) == 2, lib.last_error()
    bad = Mamba2StepArgs.from_buffer_copy(args)
    bad.buffer_len = 0
    assert lib.lib.rs_mamba2_step(ctypes.byref(bad), None) == 1
    torch.cuda.synchronize()
    assert torch.equal(cache.ssm_state, before)


def _gdn_c_args(cache, slots, step, A_log, dt_bias, out, route) -> GDNStepArgs:
    a = GDNStepArgs()
    st, ring = cache.ssm_state[0], cache.ring_kwargs(0)
    for name, t in dict(state=st, out=out, slot_idx=slots, A_log=A_log, dt_bias=dt_bias, d_cache=ring["d_cache"],
                        k_cache=ring["k_cache"], g_cache=ring["g_cache"], write_pos=ring["write_pos"], **step).items():
        setattr(a, name, t.data_ptr())
    g = cache.geom
    a.batch, a.num_slots, a.num_k_heads, a.num_v_heads = slots.shape[0], st.shape[0], g.num_k_heads, g.num_v_heads
    a.head_k_dim, a.head_v_dim, a.buffer_len, a.pad_slot_id = g.head_k_dim, g.head_v_dim, L, -1
    a.stride_state[:] = st.stride()[:3]
    for name in ("q", "k", "v", "a", "b"):
        getattr(a, f"stride_{name}")[:] = step[name].stride()[:2]
    a.stride_out[:] = out.stride()[:2]
    a.stride_d_cache[:] = ring["d_cache"].stride()[:3]
    a.stride_k_cache[:] = ring["k_cache"].stride()[:3]
    a.stride_g_cache[:] = ring["g_cache"].stride()[:2]
    a.scale, a.softplus_beta, a.softplus_threshold = 0.0, 1.0, 20.0  # scale 0: 1/sqrt(K), as the plugin passes it
    a.state_dtype, a.act_dtype, a.route = DTYPE_CODES[_name(st.dtype)], DTYPE_CODES["bf16"], ROUTE_CODES[route]
    a.ring_dtype = DTYPE_CODES[_name(cache.ring_dtype)]
    return a


def _name(dtype) -> str:
    return next(k for k, v in DT.items() if v == dtype)


@pytest.mark.parametrize("state", ["fp32", "bf16"])
def test_c_abi_gdn_step_on_the_state_dtypes_ring_equals_jit(lib, state):
    """rs_gdn_step (the GDN plugin's op) over a cycle and a flush, on the ring dtype the
    state dtype takes (bf16 d/k rings beside a bf16 state), equals the Python entry point
    on the JIT bit for bit; a ring dtype the build has no case for is refused, with
    nothing written."""
    g = model("qwen3.5-4b").geom
    H, HV, K, V, batch = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim, 32
    runs = {}
    for path in ("jit", "c"):
        torch.manual_seed(7)
        cache = GDNReplayCache(g, 1, batch + 2, L, DT[state], device="cuda")
        assert cache.ring_dtype == DT[state]
        cache.ssm_state.normal_(std=0.1)
        slots = torch.randperm(batch + 2, device="cuda")[:batch].to(torch.int32)
        A_log, dt_bias = torch.randn(HV, device="cuda"), torch.randn(HV, device="cuda")
        outs = []
        for _ in range(L + 3):
            step = dict(q=torch.randn(batch, H, K, device="cuda", dtype=torch.bfloat16),
                        k=torch.randn(batch, H, K, device="cuda", dtype=torch.bfloat16),
                        v=torch.randn(batch, HV, V, device="cuda", dtype=torch.bfloat16),
                        a=torch.randn(batch, HV, device="cuda", dtype=torch.bfloat16),
                        b=torch.randn(batch, HV, device="cuda", dtype=torch.bfloat16))
            out = torch.empty_like(step["v"])
            if path == "jit":
                rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **step, A_log=A_log, dt_bias=dt_bias,
                                                              initial_state_indices=slots, out=out, route="output_only",
                                                              **cache.ring_kwargs(0))
            else:
                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                args = _gdn_c_args(cache, slots, step, A_log, dt_bias, out, "output_only")
                lib.check(lib.lib.rs_gdn_step(ctypes.byref(args), stream), "rs_gdn_step")
            cache.advance(slots)
            outs.append(out)
        runs[path] = (outs, cache)
    for t, (a, b) in enumerate(zip(runs["jit"][0], runs["c"][0])):
        assert torch.equal(a, b), f"step {t}"
    for name in ("ssm_state", "d_cache", "k_cache", "g_cache", "write_pos"):
        assert torch.equal(getattr(runs["jit"][1], name), getattr(runs["c"][1], name)), name

    cache = runs["c"][1]
    before = (cache.ssm_state.clone(), cache.d_cache.clone())
    bad = GDNStepArgs.from_buffer_copy(args)
    bad.ring_dtype = DTYPE_CODES["fp32" if state == "bf16" else "bf16"]  # no such case built
    assert lib.lib.rs_gdn_step(ctypes.byref(bad), None) == 2, lib.last_error()
    torch.cuda.synchronize()
    assert torch.equal(cache.ssm_state, before[0]) and torch.equal(cache.d_cache, before[1])


def test_c_abi_step_with_the_fold_beside_captures_in_a_cuda_graph(lib):
    """At batch 128 rs_mamba2_step launches its fold on the library's side stream (forked
    from and joined back into the caller's stream with events): a cycle captured in one
    CUDA graph and replayed equals the same calls made eagerly, bit for bit."""
    runs = []
    for captured in (True, False):
        cache, slots, steps, params = _mamba2_setup(128, torch.float32, "output_only", seed=6)
        outs = [torch.empty_like(s["x"]) for s in steps]

        def cycle():
            stream = torch.cuda.current_stream().cuda_stream
            for s, out in zip(steps, outs):
                lib.check(lib.lib.rs_mamba2_step(ctypes.byref(_c_args(cache, slots, s, params, out, "output_only")),
                                                 ctypes.c_void_p(stream)), "rs_mamba2_step")
                lib.check(lib.lib.rs_advance_write_pos(cache.write_pos.data_ptr(), cache.write_pos.shape[0], L,
                                                       slots.data_ptr(), None, slots.shape[0], -1, 0,
                                                       ctypes.c_void_p(stream)), "rs_advance_write_pos")

        if captured:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                cycle()
            graph.replay()
        else:
            cycle()
        torch.cuda.synchronize()
        runs.append((outs, cache))
    (o_graph, c_graph), (o_eager, c_eager) = runs
    for t, (a, b) in enumerate(zip(o_graph, o_eager)):
        assert torch.equal(a, b), f"step {t}: outputs differ"
    assert torch.equal(c_graph.ssm_state, c_eager.ssm_state)
    assert torch.equal(c_graph.write_pos, c_eager.write_pos)


def test_aot_launches_inside_a_cuda_graph(aot):
    """A captured AOT decode step (kernels + cursor advance) replays like the eager JIT one."""
    cache_e, slots, steps, params = _mamba2_setup(32, torch.float32, "output_only", seed=5)
    pop_launcher(aot)
    eager = _mamba2_run(cache_e, slots, steps[:3], params, "output_only")
    push_launcher(aot)
    cache_g, slots, steps, params = _mamba2_setup(32, torch.float32, "output_only", seed=5)
    inputs = {k: steps[0][k].clone() for k in ("x", "B", "C")}
    dt = steps[0]["dt"][:, :, 0].clone()  # kept in TensorRT-LLM's tied layout (stride 0 along P)
    x_in = dict(inputs, dt=dt[:, :, None].expand(steps[0]["dt"].shape))
    out = torch.empty_like(inputs["x"])

    def step():
        rs.selective_state_update_replayssm(cache_g.ssm_state[0], **x_in, **params, dt_softplus=True,
                                            state_batch_indices=slots, out=out, route="output_only",
                                            **cache_g.ring_kwargs(0))
        cache_g.advance(slots)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # a warm-up step on a side stream: loads the modules
        snapshot = [t.clone() for t in (cache_g.ssm_state, cache_g.x_cache, cache_g.dt_cache, cache_g.B_cache,
                                        cache_g.write_pos)]
        step()
        for t, saved in zip((cache_g.ssm_state, cache_g.x_cache, cache_g.dt_cache, cache_g.B_cache,
                             cache_g.write_pos), snapshot):
            t.copy_(saved)
    torch.cuda.current_stream().wait_stream(s)
    launches_before, programmatic_before = aot.launches, aot.programmatic_launches_made
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    assert aot.launches > launches_before
    assert aot.programmatic_launches_made > programmatic_before  # (the fold, at batch 32)
    for t in range(3):
        for k in inputs:
            inputs[k].copy_(steps[t][k])
        dt.copy_(steps[t]["dt"][:, :, 0])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager[t]), f"step {t}"


@pytest.mark.parametrize("family", ["mamba2", "gdn"])
def test_spec_verify_aot_equals_jit_bit_for_bit(lib, family):
    """Speculative verify (T = 4, history 16) and cursor commits over enough steps to flush,
    through the AOT library: bit for bit the JIT's."""
    from trtllm_replayssm.integration.lifecycle import ReplaySlots

    T, batch = 4, 16
    runs = {}
    for backend in ("jit", "aot"):
        torch.manual_seed(7)
        geom = model("nemotron-3-super" if family == "mamba2" else "qwen3.5-4b").geom
        slots_n = batch + 2
        rs_slots = ReplaySlots(geom, 1, slots_n, device="cuda", spec=(T, 16))
        slots = torch.arange(batch, dtype=torch.int32, device="cuda")
        rs_slots.on_slots_assigned(slots)
        launcher = AOTLauncher(lib, strict=True) if backend == "aot" else None
        outs = []
        with launcher_in_front(launcher):
            if family == "mamba2":
                H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
                state = torch.randn(slots_n, H, P, N, device="cuda")
                A = (-torch.rand(H, device="cuda") - 0.5)[:, None, None].expand(H, P, N)
                D, dt_bias = (torch.randn(H, device="cuda")[:, None].expand(H, P) for _ in range(2))
                for _ in range(8):
                    x = torch.randn(batch, T, H, P, device="cuda", dtype=torch.bfloat16)
                    dt = torch.randn(batch, T, H, device="cuda", dtype=torch.bfloat16)[..., None].expand(batch, T, H, P)
                    B, C = (torch.randn(batch, T, G, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                    outs.append(rs_slots.mamba2_verify(0, state, x, dt, A, B, C, D=D, dt_bias=dt_bias,
                                                       dt_softplus=True, state_batch_indices=slots))
                    rs_slots.commit(torch.randint(1, T + 1, (batch,), device="cuda", dtype=torch.int32), slots)
            else:
                H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
                state = torch.randn(slots_n, HV, V, K, device="cuda") * 0.1
                A_log, dt_bias = torch.randn(HV, device="cuda"), torch.randn(HV, device="cuda")
                for _ in range(8):
                    q, k = (torch.randn(batch, T, H, K, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                    v = torch.randn(batch, T, HV, V, device="cuda", dtype=torch.bfloat16)
                    a, b = (torch.randn(batch, T, HV, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                    outs.append(rs_slots.gdn_verify(0, state, q, k, v, a, b, A_log, dt_bias,
                                                    initial_state_indices=slots))
                    rs_slots.commit(torch.randint(1, T + 1, (batch,), device="cuda", dtype=torch.int32), slots)
        assert launcher is None or launcher.launches > 0
        runs[backend] = (outs, state, rs_slots)
    for t, (a, b) in enumerate(zip(runs["jit"][0], runs["aot"][0])):
        assert torch.equal(a, b), f"verify {t}: outputs differ"
    assert torch.equal(runs["jit"][1], runs["aot"][1])
    assert torch.equal(runs["jit"][2].write_pos, runs["aot"][2].write_pos)


def _c_commit_spec(lib, wp, origin, flush, accepted, slots, num_slots, T, Bh):
    lib.check(lib.lib.rs_commit_spec(wp.data_ptr(), origin.data_ptr(), flush.data_ptr(), num_slots,
                                     accepted.data_ptr(), slots.data_ptr(), slots.numel(), T, Bh, -1, None),
              "rs_commit_spec")


def _c_spec_verify(lib, family, args, size_args):
    """``rs_<family>_spec_verify`` on a workspace of ``rs_<family>_spec_workspace_size(*size_args)``
    bytes (freed to the caching allocator after the launch: later work on the stream is ordered after it)."""
    workspace = torch.empty(getattr(lib.lib, f"rs_{family}_spec_workspace_size")(*size_args) // 4, device="cuda")
    args.workspace = workspace.data_ptr()
    lib.check(getattr(lib.lib, f"rs_{family}_spec_verify")(ctypes.byref(args), None), f"rs_{family}_spec_verify")


def _assert_runs_equal(jit, c):
    """Two runs' (outputs per step, then the state, ring and cursors) equal bit for bit."""
    for t, (a, b) in enumerate(zip(jit[0], c[0])):
        assert torch.equal(a, b), f"verify {t}: outputs differ"
    for a, b in zip(jit[1:], c[1:]):
        assert torch.equal(a, b)


def test_c_abi_mamba2_spec_verify_equals_jit(lib):
    """rs_mamba2_spec_verify and rs_commit_spec (what a TensorRT plugin calls) over steps
    with flushes equal the Python entry points on the JIT bit for bit, at a batch whose
    flush rows' launch takes blocks of 4 rows (the C launcher divides the batch by the
    kernel's row block; a block's rows past the batch are masked)."""
    from trtllm_replayssm.aot.library import Mamba2SpecArgs
    from trtllm_replayssm.ops.mamba2 import spec as m2_spec

    T, Bh, batch = 4, 16, 38
    g = model("nemotron-3-super").geom
    H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
    buf, slots_n = m2_spec.ring_capacity(T, Bh), batch + 3
    runs = {}
    for path in ("jit", "c"):
        torch.manual_seed(11)
        state = torch.randn(slots_n, H, P, N, device="cuda")
        rings = dict(x_ring=torch.zeros(slots_n, H, buf, P, device="cuda", dtype=torch.bfloat16),
                     dt_ring=torch.zeros(slots_n, H, buf, device="cuda"),
                     B_ring=torch.zeros(slots_n, G, buf, N, device="cuda", dtype=torch.bfloat16))
        wp = torch.zeros(slots_n, dtype=torch.int32, device="cuda")
        origin, flush = torch.zeros_like(wp), torch.zeros(slots_n, dtype=torch.int8, device="cuda")
        slots = torch.randperm(slots_n, device="cuda")[:batch].to(torch.int32)
        m2_spec.reset_replayssm_spec_cursors(wp, origin, flush, slots, T, Bh)
        A, D, dt_bias = -torch.rand(H, device="cuda") - 0.5, torch.randn(H, device="cuda"), torch.randn(H, device="cuda")
        outs, flushed = [], 0
        for _ in range(12):
            x = torch.randn(batch, T, H, P, device="cuda", dtype=torch.bfloat16)
            dt = torch.randn(batch, T, H, device="cuda", dtype=torch.bfloat16)
            B, C = (torch.randn(batch, T, G, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            accepted = torch.randint(1, T + 1, (batch,), device="cuda", dtype=torch.int32)
            out = torch.empty_like(x)
            flushed += int(flush[slots.long()].sum())
            if path == "jit":  # TensorRT-LLM's layout: dt, A, D and dt_bias expanded with stride 0
                m2_spec.selective_state_update_replayssm_spec(
                    state, x, dt[..., None].expand(batch, T, H, P), A[:, None, None].expand(H, P, N), B, C,
                    D=D[:, None].expand(H, P), dt_bias=dt_bias[:, None].expand(H, P), dt_softplus=True,
                    state_batch_indices=slots, out=out, write_pos=wp, origin=origin, is_flush=flush,
                    history_len=Bh, **rings)
                m2_spec.commit_replayssm_spec(wp, origin, flush, accepted, T, Bh, slots)
            else:
                a = Mamba2SpecArgs()
                for name, t in dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, dt_bias=dt_bias, out=out,
                                    slot_idx=slots, write_pos=wp, origin=origin, is_flush=flush, **rings).items():
                    setattr(a, name, t.data_ptr())
                a.batch, a.num_tokens, a.history_len, a.num_slots = batch, T, Bh, slots_n
                a.nheads, a.headdim, a.dstate, a.ngroups, a.pad_slot_id = H, P, N, G, -1
                a.stride_state[:] = state.stride()[:3]
                for name in ("x", "dt", "B", "C", "out"):
                    getattr(a, f"stride_{name}")[:] = dict(x=x, dt=dt, B=B, C=C, out=out)[name].stride()[:3]
                a.stride_A, a.stride_dt_bias = 1, 1
                a.stride_D[:] = (1, 0)
                a.stride_x_ring[:] = rings["x_ring"].stride()[:3]
                a.stride_dt_ring[:] = rings["dt_ring"].stride()[:2]
                a.stride_B_ring[:] = rings["B_ring"].stride()[:3]
                a.state_dtype, a.act_dtype, a.dt_softplus = DTYPE_CODES["fp32"], DTYPE_CODES["bf16"], 1
                _c_spec_verify(lib, "mamba2", a, (batch, T, H, P))
                _c_commit_spec(lib, wp, origin, flush, accepted, slots, slots_n, T, Bh)
            outs.append(out)
        torch.cuda.synchronize()
        assert flushed >= batch, flushed  # every row flushed at least once on the way
        runs[path] = (outs, state, rings["x_ring"], wp, origin)
    fold_cfg = m2_spec.phase_config(m2_spec.spec_config(batch), m2_spec.FOLD_ONLY)
    assert m2_spec.flush_row_block(P // fold_cfg.block_p * H, batch) == 4  # the fold launch's blocks
    _assert_runs_equal(runs["jit"], runs["c"])


@pytest.mark.parametrize("batch", [6, 48, 96], ids=["split_fold_2", "split_fold_3", "capped"])
def test_c_abi_gdn_spec_verify_equals_jit(lib, batch):
    """rs_gdn_spec_verify and rs_commit_spec over steps with flushes equal the Python entry
    points on the JIT bit for bit (Qwen3.5-122B, through the C workspace's offsets), at a
    batch of each plan of ``gdn_spec_plan``: split_fold 2; split_fold 3 (the solve and the
    ring's part, the flush rows' launch, the state's product); and split_fold 3 under the
    launches' register caps. (The JIT's state product is a programmatic dependent launch
    at 48 and 96, the C library's a plain one.)"""
    from trtllm_replayssm.aot.library import GDNSpecArgs
    from trtllm_replayssm.ops.gdn.spec import gdn_replayssm_spec_decode
    from trtllm_replayssm.ops.mamba2 import spec as m2_spec

    T, Bh = 4, 16
    g = model("qwen3.5-122b").geom
    H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
    buf, slots_n = m2_spec.ring_capacity(T, Bh), batch + 3
    runs = {}
    for path in ("jit", "c"):
        torch.manual_seed(13)
        cache = GDNReplayCache(g, 1, slots_n, buf, torch.float32, device="cuda")
        state = cache.ssm_state[0]
        state.copy_(torch.randn_like(state) * 0.1)
        rings = dict(d_ring=cache.d_cache[0], k_ring=cache.k_cache[0], g_ring=cache.g_cache[0])
        wp = torch.zeros(slots_n, dtype=torch.int32, device="cuda")
        origin, flush = torch.zeros_like(wp), torch.zeros(slots_n, dtype=torch.int8, device="cuda")
        slots = torch.randperm(slots_n, device="cuda")[:batch].to(torch.int32)
        m2_spec.reset_replayssm_spec_cursors(wp, origin, flush, slots, T, Bh)
        A_log, dt_bias = torch.randn(HV, device="cuda") * 0.5 - 0.5, torch.randn(HV, device="cuda") * 0.5
        outs, flushed = [], 0
        for _ in range(12):
            q, k = (torch.randn(batch, T, H, K, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            v = torch.randn(batch, T, HV, V, device="cuda", dtype=torch.bfloat16)
            a, b = (torch.randn(batch, T, HV, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            accepted = torch.randint(1, T + 1, (batch,), device="cuda", dtype=torch.int32)
            out = torch.empty_like(v)
            flushed += int(flush[slots.long()].sum())
            if path == "jit":
                gdn_replayssm_spec_decode(state, q, k, v, a, b, A_log, dt_bias, initial_state_indices=slots, out=out,
                                          write_pos=wp, origin=origin, is_flush=flush, history_len=Bh, **rings)
                m2_spec.commit_replayssm_spec(wp, origin, flush, accepted, T, Bh, slots)
            else:
                args = GDNSpecArgs()
                tensors = dict(state=state, q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, out=out,
                               slot_idx=slots, write_pos=wp, origin=origin, is_flush=flush, **rings)
                for name, t in tensors.items():
                    setattr(args, name, t.data_ptr())
                args.batch, args.num_tokens, args.history_len, args.num_slots, args.pad_slot_id = batch, T, Bh, slots_n, -1
                args.num_k_heads, args.num_v_heads, args.head_k_dim, args.head_v_dim = H, HV, K, V
                for name in ("state", "q", "k", "v", "a", "b", "out", "d_ring", "k_ring"):
                    getattr(args, f"stride_{name}")[:] = tensors[name].stride()[:3]
                args.stride_g_ring[:] = rings["g_ring"].stride()[:2]
                args.scale, args.softplus_beta, args.softplus_threshold = 0.0, 1.0, 20.0
                args.state_dtype, args.act_dtype = DTYPE_CODES["fp32"], DTYPE_CODES["bf16"]
                _c_spec_verify(lib, "gdn", args, (batch, T, HV, V))
                _c_commit_spec(lib, wp, origin, flush, accepted, slots, slots_n, T, Bh)
            outs.append(out)
        torch.cuda.synchronize()
        assert flushed >= batch, flushed  # every row flushed at least once on the way
        runs[path] = (outs, state, rings["d_ring"], wp, origin)
    _assert_runs_equal(runs["jit"], runs["c"])


def _enqueue_plugin(trt_plugins, mode, folder, sizes, tensors, steps):
    """Write ``tensors`` and each step's, run ``trt_plugin_enqueue.cpp`` (``mode``) on them."""
    def save(name, t):
        t.contiguous().view(torch.uint8).numpy().tofile(folder / name)

    (folder / "sizes.txt").write_text(" ".join(map(str, sizes)))
    for name, value in tensors.items():
        save(f"{name}.bin", value)
    for t, step in enumerate(steps):
        for name, value in step.items():
            save(f"{name}_{t}.bin", value)
    runner = trt_plugins.compile(Path(__file__).with_name("trt_plugin_enqueue.cpp"), folder / "runner")
    run = subprocess.run([str(runner), str(trt_plugins.library), mode, str(folder)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def _jit_steps(cache, steps):
    """Each step's tensors on the GPU, with ``t``, after the slots of its ``new`` (if any)
    entered decode (as ``ReplaySSMReset`` does before the runner's step)."""
    for t, s in enumerate(steps):
        s = {k: v.cuda() for k, v in s.items()}
        if "new" in s:
            cache.reset(s["new"])
        yield t, s


def _written(folder, name, like):
    """What the runner wrote to ``name`` (a tensor of ``like``'s shape and dtype, on the CPU)."""
    raw = torch.from_numpy(np.fromfile(folder / name, dtype=np.uint8))
    return raw.view(like.dtype).view(like.shape)


def test_tensorrt_plugin_enqueue_equals_jit(trt_plugins, tmp_path):
    """``ReplaySSMMamba2Step`` with plugin-owned rings (the form examples/trtllm_build builds),
    enqueued outside TensorRT by ``trt_plugin_enqueue.cpp`` over three ring cycles, against
    the JIT step on a ring cache of its own: rows enter decode at staggered steps
    (``new_slots``), one moves to a new request's slot mid-run, a padding row's output is
    never written; outputs at every step and the final states bit for bit. The rings hold two
    slots more than the state: at steps 5-8 row 3 names one of those, which the state does
    not have, and gets NaN outputs with nothing written (as the JIT step does)."""
    g = model("nemotron-3-super").geom
    H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
    S, B, T, MOVE = 6, 4, 3 * L, 25
    start = [0, 3, 7, None]  # the step each row's request starts decoding (None: a padding row)
    BAD = range(5, 9)  # the steps row 3 names slot S + 1: in the rings' max_slots, not in the state

    def slots_at(t):  # row 2's request ends at step MOVE; the next one decodes in slot 5
        return [(S + 1 if t in BAD else -1) if s is None else -1 if t < s else 5 if (r == 2 and t >= MOVE)
                else [4, 1, 2][r] for r, s in enumerate(start)]

    def new_at(t):  # the slots whose request decodes for the first time at step t
        return [slot if t == start[r] or (r == 2 and t == MOVE) else -1 for r, slot in enumerate(slots_at(t))]

    gen = torch.Generator().manual_seed(0)
    state0 = torch.randn(S, H, P, N, generator=gen)
    A, D, dt_bias = -torch.rand(H, generator=gen) - 0.5, torch.randn(H, generator=gen), torch.randn(H, generator=gen)
    y_init = torch.full((B, H, P), 7.0, dtype=torch.bfloat16)  # a padding row's output keeps it
    bf16 = lambda *shape: torch.randn(*shape, generator=gen).to(torch.bfloat16)  # noqa: E731
    steps = [dict(x=bf16(B, H, P), dt=bf16(B, H), B=bf16(B, G, N), C=bf16(B, G, N), z=bf16(B, H, P),
                  slot=torch.tensor(slots_at(t), dtype=torch.int32), new=torch.tensor(new_at(t), dtype=torch.int32))
             for t in range(T)]
    _enqueue_plugin(trt_plugins, "mamba2", tmp_path, (S, B, H, P, N, G, L, T, S + 2),
                    dict(state=state0, A=A, D=D, dt_bias=dt_bias, y_init=y_init), steps)

    cache = Mamba2ReplayCache(g, 1, S, L, torch.float32, torch.bfloat16, "cuda")
    cache.ssm_state[0].copy_(state0)
    y = y_init.cuda()
    for t, s in _jit_steps(cache, steps):
        rs.selective_state_update_replayssm(cache.ssm_state[0], s["x"], s["dt"], A.cuda(), s["B"], s["C"],
                                            D=D.cuda(), z=s["z"], dt_bias=dt_bias.cuda(), dt_softplus=True,
                                            state_batch_indices=s["slot"], out=y, route="output_only",
                                            **cache.ring_kwargs(0))
        cache.advance(s["slot"])
        written = _written(tmp_path, f"y_{t}.bin", y_init)
        assert torch.equal(written.view(torch.int16), y.cpu().view(torch.int16)), f"step {t}"  # NaN bits too
        # row 3: padding (never written) until step 5, then NaN, kept once it pads again
        assert written[3].isnan().all() if t >= BAD.start else torch.equal(written[3], y_init[3]), f"row 3, step {t}"
    state = _written(tmp_path, "state_out.bin", state0)
    assert torch.equal(state, cache.ssm_state[0].cpu())
    assert not torch.equal(state[[4, 1, 2, 5]], state0[[4, 1, 2, 5]])  # every used slot stored a checkpoint
    assert torch.equal(state[[0, 3]], state0[[0, 3]])  # and no other


@pytest.mark.parametrize("route, state", [("output_only", "fp32"), ("always_flush", "bf16")])
def test_tensorrt_mamba2_plugins_on_network_rings_equal_jit(trt_plugins, tmp_path, route, state):
    """``ReplaySSMMamba2Step`` on network rings, with ``z`` and ``force_flush`` inputs, then
    ``ReplaySSMAdvance`` with the same flags (``flush_all`` on the route that stores every
    row), enqueued outside TensorRT over two ring cycles from staggered cursors and non-empty
    rings, against the JIT step and cursor op: outputs at every step, then state, rings and
    cursors, bit for bit. Rows 0 and 2 are forced to flush at some steps; at step 10 row 1's
    request ends and a new one starts in slot 3, whose non-empty ring ``ReplaySSMReset``
    empties first; row 3 pads."""
    g = model("nemotron-3-super").geom
    H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
    S, B, T, MOVE = 6, 4, 2 * L + 3, 10
    gen = torch.Generator().manual_seed(2)
    bf16 = lambda *shape: torch.randn(*shape, generator=gen).to(torch.bfloat16)  # noqa: E731
    start = dict(state=torch.randn(S, H, P, N, generator=gen).to(DT[state]), x_cache=bf16(S, H, L, P),
                 dt_cache=torch.rand(S, H, L, generator=gen) * 0.1, B_cache=bf16(S, G, L, N),
                 write_pos=torch.tensor([5, 0, 11, 3, 15, 9], dtype=torch.int32))  # staggered, some rings full
    A, D, dt_bias = -torch.rand(H, generator=gen) - 0.5, torch.randn(H, generator=gen), torch.randn(H, generator=gen)
    y_init = torch.full((B, H, P), 7.0, dtype=torch.bfloat16)

    def step_rows(t):
        return dict(slot=torch.tensor([4, 3 if t >= MOVE else 0, 2, -1], dtype=torch.int32),
                    flush=torch.tensor([t % 7 == 2, 0, t == 4, 1], dtype=torch.int8),  # the padding row's flag too
                    **({"new": torch.tensor([-1, 3, -1, -1], dtype=torch.int32)} if t == MOVE else {}))

    steps = [dict(x=bf16(B, H, P), dt=bf16(B, H), B=bf16(B, G, N), C=bf16(B, G, N), z=bf16(B, H, P), **step_rows(t))
             for t in range(T)]
    sizes = (S, B, H, P, N, G, L, T, ROUTE_CODES[route], int(state == "bf16"), int(route in FLUSH_EVERY_STEP))
    _enqueue_plugin(trt_plugins, "mamba2_net", tmp_path, sizes, dict(**start, A=A, D=D, dt_bias=dt_bias, y_init=y_init),
                    steps)

    cache = Mamba2ReplayCache(g, 1, S, L, DT[state], torch.bfloat16, "cuda")
    for name in ("ssm_state", "x_cache", "dt_cache", "B_cache"):
        getattr(cache, name)[0].copy_(start["state" if name == "ssm_state" else name])
    cache.write_pos.copy_(start["write_pos"])
    y = y_init.cuda()
    for t, s in _jit_steps(cache, steps):
        rs.selective_state_update_replayssm(cache.ssm_state[0], s["x"], s["dt"], A.cuda(), s["B"], s["C"],
                                            D=D.cuda(), z=s["z"], dt_bias=dt_bias.cuda(), dt_softplus=True,
                                            state_batch_indices=s["slot"], out=y, route=route,
                                            force_flush=s["flush"], **cache.ring_kwargs(0))
        cache.advance(s["slot"], force_flush=s["flush"], route=route)
        assert torch.equal(_written(tmp_path, f"y_{t}.bin", y_init), y.cpu()), f"step {t}"
    assert torch.equal(y[3].cpu(), y_init[3])
    state_out = _written(tmp_path, "state_out.bin", start["state"])
    assert torch.equal(state_out, cache.ssm_state[0].cpu())
    for name in ("x_cache", "dt_cache", "B_cache"):
        assert torch.equal(_written(tmp_path, f"{name}_out.bin", start[name]), getattr(cache, name)[0].cpu()), name
    assert torch.equal(_written(tmp_path, "write_pos_out.bin", start["write_pos"]), cache.write_pos.cpu())
    # slot 0's request (wp 0 -> 10, never forced) stores a state only where every step does
    stored, untouched = ([4, 2, 3, 0], [1, 5]) if route == "always_flush" else ([4, 2, 3], [1, 5, 0])
    for slot in stored:
        assert not torch.equal(state_out[slot], start["state"][slot]), slot
    assert torch.equal(state_out[untouched], start["state"][untouched])


@pytest.mark.parametrize("moves, state", [(False, "fp32"), (True, "fp32"), (True, "bf16")])
def test_tensorrt_gdn_plugins_enqueue_equal_jit(trt_plugins, tmp_path, moves, state):
    """``ReplaySSMGDNStep`` on network rings (its q scale left at the field's default, 0: 1/sqrt(K))
    then ``ReplaySSMAdvance``, enqueued outside TensorRT over two ring cycles from staggered
    cursors and non-empty rings, against the JIT step and cursor op: outputs at every step,
    then state, rings and cursors, bit for bit; a padding row's output never written.
    ``moves``: at step 10 row 1's request ends and a new one starts in slot 3, whose non-empty
    ring ``ReplaySSMReset`` empties first. With a bf16 state (and bf16 d / k rings), rows 0
    and 2 are also forced to flush at some steps (``force_flush`` on the step and the advance)."""
    g = model("qwen3.5-4b").geom
    H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
    S, B, T, MOVE = 6, 4, 2 * L + 3, 10
    gen = torch.Generator().manual_seed(1)
    wide = DT[state]  # the state's and the d / k rings' dtype (cache.gdn_ring_dtype)
    start = dict(state=(torch.randn(S, HV, V, K, generator=gen) * 0.1).to(wide),
                 d_cache=torch.randn(S, HV, L, V, generator=gen).to(wide),
                 k_cache=(torch.randn(S, H, L, K, generator=gen) * 0.1).to(wide),
                 g_cache=-torch.rand(S, HV, L, generator=gen) * 0.1,
                 write_pos=torch.tensor([5, 0, 11, 3, 15, 9], dtype=torch.int32))  # staggered, some rings full
    A_log, dt_bias = torch.randn(HV, generator=gen), torch.randn(HV, generator=gen)
    y_init = torch.full((B, HV, V), 7.0, dtype=torch.bfloat16)
    bf16 = lambda *shape: torch.randn(*shape, generator=gen).to(torch.bfloat16)  # noqa: E731

    forced = state == "bf16"

    def step_slots(t):  # row 3 pads
        return dict(slot=torch.tensor([4, 3 if moves and t >= MOVE else 0, 2, -1], dtype=torch.int32),
                    **({"new": torch.tensor([-1, 3, -1, -1], dtype=torch.int32)} if moves and t == MOVE else {}),
                    **({"flush": torch.tensor([t % 7 == 2, 0, t == 4, 1], dtype=torch.int8)} if forced else {}))

    steps = [dict(q=bf16(B, H, K), k=bf16(B, H, K), v=bf16(B, HV, V), a=bf16(B, HV), b=bf16(B, HV), **step_slots(t))
             for t in range(T)]
    _enqueue_plugin(trt_plugins, "gdn", tmp_path, (S, B, H, HV, K, V, L, T, int(state == "bf16")),
                    dict(**start, A_log=A_log, dt_bias=dt_bias, y_init=y_init), steps)

    cache = GDNReplayCache(g, 1, S, L, wide, device="cuda")
    assert cache.ring_dtype == wide  # the runner's rings
    cache.ssm_state[0].copy_(start["state"])
    for name in ("d_cache", "k_cache", "g_cache"):
        getattr(cache, name)[0].copy_(start[name])
    cache.write_pos.copy_(start["write_pos"])
    y = y_init.cuda()
    for t, s in _jit_steps(cache, steps):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], s["q"], s["k"], s["v"], s["a"], s["b"],
                                                      A_log.cuda(), dt_bias.cuda(), initial_state_indices=s["slot"],
                                                      out=y, route="output_only", force_flush=s.get("flush"),
                                                      **cache.ring_kwargs(0))
        cache.advance(s["slot"], force_flush=s.get("flush"))
        assert torch.equal(_written(tmp_path, f"y_{t}.bin", y_init), y.cpu()), f"step {t}"
    assert torch.equal(y[3].cpu(), y_init[3])
    assert torch.equal(_written(tmp_path, "state_out.bin", start["state"]), cache.ssm_state[0].cpu())
    for name in ("d_cache", "k_cache", "g_cache"):
        assert torch.equal(_written(tmp_path, f"{name}_out.bin", start[name]), getattr(cache, name)[0].cpu()), name
    assert torch.equal(_written(tmp_path, "write_pos_out.bin", start["write_pos"]), cache.write_pos.cpu())
    assert not torch.equal(cache.ssm_state[0][[4, 0, 2]].cpu(), start["state"][[4, 0, 2]])  # flushes happened
