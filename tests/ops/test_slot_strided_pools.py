"""Pools whose slots lie further apart than a slot's block (TensorRT-LLM's KV cache
manager V2 interleaves other per-slot buffers between two slots' states; its rings can
live there too): every kernel gives the results it gives on packed pools (bit for bit on
the interpreter; on a GPU within fp32 rounding, as Triton compiles a stride that is not a
multiple of 16 into other code), and the bytes between slots stay untouched."""

import pytest
import torch

import gapped_pools
from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, Mamba2Geometry, gdn_ring_layout, mamba2_ring_layout
from trtllm_replayssm.integration.lifecycle import ReplaySlots

SLOTS, ROWS = 5, [3, -1, 0, 4]  # slot 1 and 2 unused, row 1 padding
REAL = [i for i, slot in enumerate(ROWS) if slot >= 0]  # a padding row's output is left unwritten


def _pool(shape, dtype):
    return gapped_pools.GappedPool(shape, dtype, DEVICE)


def _gapped_rings(layout, num_layers):
    return gapped_pools.gapped_rings(layout, num_layers, SLOTS, DEVICE)


def _assert_same(a, b, what):
    if a.is_cuda and a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{what}: strided pool differs from packed pool")
    else:
        assert torch.equal(a, b), f"{what}: strided pool differs from packed pool"


def _assert_same_outputs(a, b, what):
    _assert_same(a[REAL], b[REAL], what)


def _mamba2_step_inputs(g, n, H, P, G, N):
    return dict(x=torch.randn(n, H, P, generator=g).to(DEVICE), dt=torch.randn(n, H, generator=g).to(DEVICE),
                B=torch.randn(n, G, N, generator=g).to(DEVICE), C=torch.randn(n, G, N, generator=g).to(DEVICE),
                D=torch.randn(H, generator=g).to(DEVICE), dt_softplus=True)


@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
def test_mamba2_replay_on_gapped_pools(route):
    geom, L, layers = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2), 4, 2
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    g = torch.Generator().manual_seed(0)
    start = torch.randn(layers, SLOTS, H, P, N, generator=g).to(DEVICE)
    packed_state = start.clone()
    gapped_state = [_pool((SLOTS, H, P, N), torch.float32) for _ in range(layers)]
    for i, pool in enumerate(gapped_state):
        pool.view.copy_(start[i])
    ring_pools, ring_views = _gapped_rings(mamba2_ring_layout(geom, L, torch.float32), layers)
    packed = ReplaySlots(geom, layers, SLOTS, L, act_dtype=torch.float32, device=DEVICE, route=route)
    gapped = ReplaySlots(geom, layers, SLOTS, L, act_dtype=torch.float32, device=DEVICE, route=route, rings=ring_views)
    idx = torch.tensor(ROWS, dtype=torch.int32, device=DEVICE)
    A = [-(torch.rand(H, generator=g) + 0.5).to(DEVICE) for _ in range(layers)]
    for replay in (packed, gapped):  # staggered cursors: slot 0 starts two entries behind
        replay.on_slots_assigned(torch.tensor([3, 4], dtype=torch.int32, device=DEVICE))
    for step in range(2 * L + 3):  # several flushes
        if step == 2:
            for replay in (packed, gapped):
                replay.on_slots_assigned(torch.tensor([0], dtype=torch.int32, device=DEVICE))
        for layer in range(layers):
            kw = dict(_mamba2_step_inputs(g, len(ROWS), H, P, G, N), A=A[layer], state_batch_indices=idx)
            y_packed = packed.mamba2_step(layer, packed_state[layer], **kw)
            y_gapped = gapped.mamba2_step(layer, gapped_state[layer].view, **kw)
            _assert_same_outputs(y_gapped, y_packed, f"output, step {step} layer {layer}")
        packed.after_step(idx)
        gapped.after_step(idx)
    _assert_same(gapped.write_pos, packed.write_pos, "cursors")
    for layer in range(layers):
        _assert_same(gapped_state[layer].view, packed_state[layer], f"checkpoint, layer {layer}")
    assert packed.write_pos.tolist()[3] != 0, "the rings must hold entries for make_exact to fold"
    folded = torch.tensor([3, 0], dtype=torch.int32, device=DEVICE)
    packed.make_exact(list(packed_state), folded, A)
    gapped.make_exact([p.view for p in gapped_state], folded, A)
    for layer in range(layers):
        _assert_same(gapped_state[layer].view, packed_state[layer], f"folded state, layer {layer}")
    assert all(p.gaps_untouched() for p in gapped_state)
    assert all(p.gaps_untouched() for ps in ring_pools.values() for p in ps)


@pytest.mark.parametrize("order", ["HV,V,K", "HV,K,V"])
def test_gdn_replay_on_gapped_pools(order):
    geom, L = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16), 4
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    g = torch.Generator().manual_seed(1)
    block = (HV, V, K) if order == "HV,V,K" else (HV, K, V)
    start = (torch.randn(SLOTS, *block, generator=g) * 0.3).to(DEVICE)
    packed_state, gapped_state = start.clone(), _pool((SLOTS, *block), torch.float32)
    gapped_state.view.copy_(start)
    ring_pools, ring_views = _gapped_rings(gdn_ring_layout(geom, L, torch.float32), 1)
    packed = ReplaySlots(geom, 1, SLOTS, L, device=DEVICE, gdn_pool_order=order)
    gapped = ReplaySlots(geom, 1, SLOTS, L, device=DEVICE, gdn_pool_order=order, rings=ring_views)
    idx = torch.tensor(ROWS, dtype=torch.int32, device=DEVICE)
    A_log, dt_bias = torch.zeros(HV, device=DEVICE), torch.zeros(HV, device=DEVICE)
    n = len(ROWS)
    for step in range(2 * L + 1):
        kw = dict(q=torch.randn(n, H, K, generator=g).to(DEVICE), k=torch.randn(n, H, K, generator=g).to(DEVICE),
                  v=torch.randn(n, HV, V, generator=g).to(DEVICE), a=torch.randn(n, HV, generator=g).to(DEVICE),
                  b=torch.randn(n, HV, generator=g).to(DEVICE), A_log=A_log, dt_bias=dt_bias,
                  initial_state_indices=idx)
        _assert_same_outputs(gapped.gdn_step(0, gapped_state.view, **kw), packed.gdn_step(0, packed_state, **kw),
                             f"output, step {step}")
        packed.after_step(idx)
        gapped.after_step(idx)
    _assert_same(gapped_state.view, packed_state, "checkpoint")
    folded = torch.tensor([3, 0, 4], dtype=torch.int32, device=DEVICE)
    packed.make_exact([packed_state], folded)
    gapped.make_exact([gapped_state.view], folded)
    _assert_same(gapped_state.view, packed_state, "folded state")
    assert gapped_state.gaps_untouched()
    assert all(p.gaps_untouched() for ps in ring_pools.values() for p in ps)


def test_mamba2_speculative_verify_on_gapped_pools():
    geom, T, Bh = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1), 2, 2
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    g = torch.Generator().manual_seed(2)
    start = torch.randn(SLOTS, H, P, N, generator=g).to(DEVICE)
    packed_state, gapped_state = start.clone(), _pool((SLOTS, H, P, N), torch.float32)
    gapped_state.view.copy_(start)
    packed = ReplaySlots(geom, 1, SLOTS, act_dtype=torch.float32, device=DEVICE, spec=(T, Bh))
    ring_pools, ring_views = _gapped_rings(mamba2_ring_layout(geom, packed.rings.buffer_len, torch.float32), 1)
    gapped = ReplaySlots(geom, 1, SLOTS, act_dtype=torch.float32, device=DEVICE, spec=(T, Bh), rings=ring_views)
    idx = torch.tensor(ROWS, dtype=torch.int32, device=DEVICE)
    A = -(torch.rand(H, generator=g) + 0.5).to(DEVICE)
    for replay in (packed, gapped):
        replay.on_slots_assigned(torch.tensor([0, 3, 4], dtype=torch.int32, device=DEVICE))
    n = len(ROWS)
    for step, accepted in enumerate(([2, 0, 1, 2], [1, 0, 2, 2], [2, 0, 2, 1])):
        kw = dict(x=torch.randn(n, T, H, P, generator=g).to(DEVICE), dt=torch.randn(n, T, H, generator=g).to(DEVICE),
                  A=A, B=torch.randn(n, T, G, N, generator=g).to(DEVICE),
                  C=torch.randn(n, T, G, N, generator=g).to(DEVICE), dt_softplus=True, state_batch_indices=idx)
        _assert_same_outputs(gapped.mamba2_verify(0, gapped_state.view, **kw),
                             packed.mamba2_verify(0, packed_state, **kw), f"verify output, step {step}")
        acc = torch.tensor(accepted, dtype=torch.int32, device=DEVICE)
        packed.commit(acc, idx)
        gapped.commit(acc, idx)
    _assert_same(gapped_state.view, packed_state, "checkpoint")
    _assert_same(gapped.write_pos, packed.write_pos, "cursors")
    assert gapped_state.gaps_untouched()
    assert all(p.gaps_untouched() for ps in ring_pools.values() for p in ps)


def test_ring_views_are_checked():
    geom = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1)
    layout = mamba2_ring_layout(geom, 4, torch.float32)
    _, views = _gapped_rings(layout, 1)
    with pytest.raises(ValueError, match="must have 2 layer views"):
        ReplaySlots(geom, 2, SLOTS, 4, act_dtype=torch.float32, device=DEVICE, rings=views)
    with pytest.raises(TypeError, match=r"rings\['x_cache'\]\[0\] must have dtype"):
        ReplaySlots(geom, 1, SLOTS, 4, act_dtype=torch.bfloat16, device=DEVICE, rings=views)
    views["B_cache"] = [views["B_cache"][0].transpose(-1, -2).contiguous().transpose(-1, -2)]
    with pytest.raises(ValueError, match="each slot's block packed"):
        ReplaySlots(geom, 1, SLOTS, 4, act_dtype=torch.float32, device=DEVICE, rings=views)
    with pytest.raises(ValueError, match="must have the views"):
        ReplaySlots(geom, 1, SLOTS, 4, act_dtype=torch.float32, device=DEVICE, rings={"x_cache": views["x_cache"]})
