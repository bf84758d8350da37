"""The drop-in state-update functions an adapter installs, on plain tensors: decode calls
on registered pools run ReplaySSM and match the standard kernel over several cycles; the
last layer of a step moves the cursors once; everything else reaches the original."""

import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, Mamba2Geometry
from trtllm_replayssm.integration.hooks import StateRegistry, make_gdn_update, make_mamba2_update
from trtllm_replayssm.integration.lifecycle import ReplaySlots
from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update as gdn_standard
from trtllm_replayssm.ops.mamba2 import selective_state_update as m2_standard

PAD = -1


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_mamba2_hook_matches_standard_and_falls_back():
    geom, L = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2), 4
    g = torch.Generator().manual_seed(0)
    pool = torch.randn(2, 3, 4, 8, 16, generator=g).to(DEVICE)
    twin = pool.clone()
    calls = []

    def original(state, x, *args, **kw):  # stands in for the engine's own kernel
        calls.append(x.dim())
        kw = {k: v for k, v in kw.items() if k not in ("disable_state_update", "intermediate_states_buffer",
                                                         "cache_steps")}
        return m2_standard(state, x, *args, **kw)

    replay = ReplaySlots(geom, 2, 3, L, act_dtype=torch.float32, device=DEVICE)
    reg = StateRegistry()
    reg.register_pool(pool, replay)
    update = make_mamba2_update(original, reg)
    idx = torch.tensor([2, PAD, 0], dtype=torch.int32, device=DEVICE)
    replay.on_slots_assigned(idx)
    A = [-(torch.rand(4, generator=g) + 0.5).to(DEVICE) for _ in range(2)]
    for step in range(2 * L + 1):
        for layer in range(2):
            kw = dict(x=torch.randn(3, 4, 8, generator=g).to(DEVICE), dt=torch.randn(3, 4, generator=g).to(DEVICE),
                      A=A[layer], B=torch.randn(3, 2, 16, generator=g).to(DEVICE),
                      C=torch.randn(3, 2, 16, generator=g).to(DEVICE), dt_softplus=True, state_batch_indices=idx,
                      pad_slot_id=PAD)
            y = update(pool[layer], **kw, disable_state_update=False)
            y_std = m2_standard(twin[layer], **kw)
            assert _rel(y[[0, 2]], y_std[[0, 2]]) < 1e-4, f"step {step} layer {layer}"
        assert int(replay.write_pos[2]) == (step + 1) % L  # moved once per step, by the last layer
    assert calls == []  # every decode call took the replay path
    before = pool.clone()
    update(twin[0], **kw)  # an unregistered pool goes to the original
    assert calls == [3] and torch.equal(pool, before)
    # A registered pool's call with arguments the replay step does not take (a verify's
    # intermediate states, cache steps) goes to the original too.
    wp = replay.write_pos.clone()
    update(pool[1], **kw, intermediate_states_buffer=torch.zeros(3, 1, 4, 8, 16, device=DEVICE))
    update(pool[1], **kw, cache_steps=1)
    assert calls == [3, 3, 3] and torch.equal(replay.write_pos, wp)


GDN_L = 4


def _gdn_hook_rig(seed: int, slots, original=lambda **kw: None):
    """A registered GDN pool (1 layer, 3 slots) with its standard-kernel twin, the hook over
    ``original``, the rows' slots (entered decode) and the layer's A_log / dt_bias."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=8)
    g = torch.Generator().manual_seed(seed)
    pool = (torch.randn(1, 3, 2, 8, 16, generator=g) * 0.3).to(DEVICE)
    replay = ReplaySlots(geom, 1, 3, GDN_L, device=DEVICE)
    reg = StateRegistry()
    reg.register_pool(pool, replay)
    idx = torch.tensor(slots, dtype=torch.int32, device=DEVICE)
    replay.on_slots_assigned(idx)
    A_log, dtb = (torch.randn(2, generator=g) * 0.5).to(DEVICE), torch.randn(2, generator=g).to(DEVICE)
    return g, pool, pool.clone(), replay, make_gdn_update(original, reg), idx, A_log, dtb


def test_gdn_hook_matches_standard():
    L = GDN_L
    g, pool, twin, replay, update, idx, A_log, dtb = _gdn_hook_rig(1, [1, 2])
    for step in range(2 * L + 1):
        q, k = torch.randn(2, 1, 1, 16, generator=g).to(DEVICE), torch.randn(2, 1, 1, 16, generator=g).to(DEVICE)
        v, a, b = (torch.randn(2, 1, 2, 8, generator=g).to(DEVICE), torch.randn(2, 1, 2, generator=g).to(DEVICE),
                   torch.randn(2, 1, 2, generator=g).to(DEVICE))
        o = update(A_log=A_log, a=a, dt_bias=dtb, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
                   initial_state_source=pool[0], initial_state_indices=idx, use_qk_l2norm_in_kernel=True)
        o_std = gdn_standard(twin[0], q[:, 0], k[:, 0], v[:, 0], a[:, 0], b[:, 0], A_log, dtb,
                             initial_state_indices=idx)
        assert o.shape == (2, 1, 2, 8) and _rel(o[:, 0], o_std) < 1e-4, f"step {step}"
    assert int(replay.write_pos[1]) == (2 * L + 1) % L


def test_gdn_hook_takes_the_packed_varlen_decode_layout():
    """TensorRT-LLM main passes decode tokens packed, q (1, N, H, K) with cu_seqlens (N + 1):
    the hook serves it (one token per sequence) and returns the packed shape; a multi-token
    call (prefill, verify) goes to the engine's function."""
    L = GDN_L
    calls = []
    g, pool, twin, replay, update, idx, A_log, dtb = _gdn_hook_rig(2, [2, 0], lambda **kw: calls.append(kw))
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    for step in range(L + 1):
        q, k = (torch.randn(1, 2, 1, 16, generator=g).to(DEVICE) for _ in range(2))
        v = torch.randn(1, 2, 2, 8, generator=g).to(DEVICE)
        a, b = (torch.randn(1, 2, 2, generator=g).to(DEVICE) for _ in range(2))
        o = update(A_log=A_log, a=a, dt_bias=dtb, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
                   initial_state_source=pool[0], initial_state_indices=idx, use_qk_l2norm_in_kernel=True,
                   cu_seqlens=cu)
        o_std = gdn_standard(twin[0], q[0], k[0], v[0], a[0], b[0], A_log, dtb, initial_state_indices=idx)
        assert o.shape == (1, 2, 2, 8) and _rel(o[0], o_std) < 1e-4, f"step {step}"
    assert not calls
    two_tokens = torch.tensor([0, 2], dtype=torch.int32, device=DEVICE)  # one sequence of 2 tokens
    update(A_log=A_log, a=a, dt_bias=dtb, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
           initial_state_source=pool[0], initial_state_indices=idx[:1], cu_seqlens=two_tokens)
    assert len(calls) == 1
    # One token a sequence, but a state index count that is not the sequences': not a
    # decode call the hook can serve, so the engine's function gets it as it came.
    three = torch.tensor([2, 0, 1], dtype=torch.int32, device=DEVICE)
    update(A_log=A_log, a=a, dt_bias=dtb, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v, b=b,
           initial_state_source=pool[0], initial_state_indices=three, cu_seqlens=cu)
    assert len(calls) == 2 and calls[1]["initial_state_indices"] is three


def test_gdn_state_order_is_read_from_the_kernel():
    from trtllm_replayssm.integration.hooks import gdn_state_order

    v_k = "p_h0 = h0_source + idx * s_h0_0 + i_hv * V * K + o_k[:, None] + o_v[None, :] * K"
    k_v = "p_h0 = h0 + i_nh * K * V + o_k[:, None] * V + o_v[None, :]"
    assert gdn_state_order(v_k) == "HV,V,K"
    assert gdn_state_order(k_v) == "HV,K,V"
    assert gdn_state_order("def f(): pass") is None
    assert gdn_state_order(v_k + "\n" + k_v) is None  # both: not ours to guess
