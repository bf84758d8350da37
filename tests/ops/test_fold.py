"""Folding a ring into its checkpoint without a new token equals the standard state."""

import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, GDNReplayCache, Mamba2Geometry, Mamba2ReplayCache
from trtllm_replayssm.ops.fold import fold_gdn_rings, fold_mamba2_rings
from trtllm_replayssm.ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from trtllm_replayssm.ops.mamba2 import selective_state_update, selective_state_update_replayssm


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_mamba2_fold_equals_standard_state():
    g = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2)
    L, slots_n, steps = 8, 3, 5
    cache = Mamba2ReplayCache(g, 1, slots_n, L, torch.float32, torch.float32, device=DEVICE)
    cache.ssm_state.normal_()
    std = cache.ssm_state[0].clone()
    A, D, dtb = -torch.rand(4, device=DEVICE) - 0.5, torch.randn(4, device=DEVICE), torch.randn(4, device=DEVICE)
    for _ in range(steps):
        kw = dict(x=torch.randn(slots_n, 4, 8, device=DEVICE), dt=torch.randn(slots_n, 4, device=DEVICE), A=A,
                  B=torch.randn(slots_n, 2, 16, device=DEVICE), C=torch.randn(slots_n, 2, 16, device=DEVICE), D=D,
                  dt_bias=dtb, dt_softplus=True)
        selective_state_update(std, **kw)
        selective_state_update_replayssm(cache.ssm_state[0], **kw, route="output_only", **cache.ring_kwargs(0))
        cache.advance()
    assert int(cache.write_pos[0]) == steps
    fold_mamba2_rings(cache.ssm_state[0], cache.x_cache[0], cache.dt_cache[0], cache.B_cache[0], A, cache.write_pos,
                      torch.tensor([0, 2], device=DEVICE))
    assert _rel(cache.ssm_state[0, 0], std[0]) < 1e-5 and _rel(cache.ssm_state[0, 2], std[2]) < 1e-5
    assert _rel(cache.ssm_state[0, 1], std[1]) > 1e-2  # slot 1 was not folded: still the old checkpoint


def test_gdn_fold_equals_standard_state():
    # Two key heads of two value heads each: value head hv reads key head hv // 2.
    g = GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=8)
    L, slots_n, steps = 8, 2, 6
    cache = GDNReplayCache(g, 1, slots_n, L, torch.float32, device=DEVICE)
    cache.ssm_state.normal_().mul_(0.3)
    std = cache.ssm_state[0].clone()
    A_log, dtb = torch.randn(4, device=DEVICE) * 0.5, torch.randn(4, device=DEVICE)
    for _ in range(steps):
        args = (torch.randn(slots_n, 2, 16, device=DEVICE), torch.randn(slots_n, 2, 16, device=DEVICE),
                torch.randn(slots_n, 4, 8, device=DEVICE), torch.randn(slots_n, 4, device=DEVICE),
                torch.randn(slots_n, 4, device=DEVICE), A_log, dtb)
        fused_sigmoid_gating_delta_rule_update(std, *args)
        fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], *args, route="output_only",
                                                   **cache.ring_kwargs(0))
        cache.advance(route="output_only")
    fold_gdn_rings(cache.ssm_state[0], cache.d_cache[0], cache.k_cache[0], cache.g_cache[0], cache.write_pos,
                   torch.arange(slots_n, device=DEVICE))
    assert _rel(cache.ssm_state[0], std) < 1e-5
