"""The installed decode-step functions at real shapes inside a CUDA graph (GPU only), the
way TensorRT-LLM main runs them: V2-style gapped pools (rings in each slot's page, a
cursor mirror), padding rows on a reserved dummy slot, staggered cursors. One decode step
of every layer (hook calls and the cursor move) is captured once and replayed over three
ring cycles; it matches the standard kernel run eagerly on packed twins."""

import pytest
import torch

from conftest import requires_cuda
from gapped_pools import GappedPool, gapped_rings
from trtllm_replayssm.cache import gdn_ring_layout, mamba2_ring_layout
from trtllm_replayssm.integration.hooks import StateRegistry, make_gdn_update, make_mamba2_update
from trtllm_replayssm.integration.lifecycle import ReplaySlots
from trtllm_replayssm.models import GDN_MODELS, MAMBA2_MODELS
from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update as gdn_standard
from trtllm_replayssm.ops.mamba2 import selective_state_update as mamba2_standard

pytestmark = requires_cuda

L, LAYERS, SLOTS, DUMMY = 16, 2, 72, 0
REAL_SLOTS = list(range(1, 63))  # 62 requests
ROWS = REAL_SLOTS + [DUMMY, DUMMY]  # two padding rows on the dummy slot: a batch of 64


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _stagger(replay, run_eager_step):
    """Slots 1..31 start 5 steps ahead of the rest."""
    replay.on_slots_assigned(torch.tensor(REAL_SLOTS, dtype=torch.int32, device="cuda"))
    early = torch.tensor(REAL_SLOTS[:31], dtype=torch.int32, device="cuda")
    for _ in range(5):
        run_eager_step(early)


def _run_cycles(replay, fill, step, twin_step, idx, gapped_pools):
    """Staggered cursors, then one step captured and replayed over three ring cycles, each
    checked against the twins; the cursor mirror follows and the pools' gaps stay."""
    n = len(idx)

    def eager(slots):
        fill(len(slots))
        step(slots, len(slots))
        twin_step(slots, len(slots))

    _stagger(replay, eager)
    eager(idx)  # compiles every kernel of the captured step
    graph = _capture(lambda: step(idx, n))
    for _ in range(3 * L):
        fill(n)
        graph.replay()
        twin_step(idx, n)
    torch.cuda.synchronize()
    real = torch.tensor(REAL_SLOTS, device="cuda")
    assert torch.equal(replay.cursor_mirror[real, 0], replay.write_pos[real])
    assert len(set(replay.write_pos[real].tolist())) == 2  # still staggered
    assert all(p.gaps_untouched() for p in gapped_pools)


def _capture(step):
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


@pytest.mark.parametrize("model,route", [("nemotron-3-nano-4b", "output_only"), ("nemotron-3-super", "state_and_output")])
def test_mamba2_decode_step_in_cuda_graph_on_gapped_pools(model, route):
    geom = MAMBA2_MODELS[model].geom
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    g = torch.Generator(device="cuda").manual_seed(0)
    pools = [GappedPool((SLOTS, H, P, N), torch.float32, "cuda", gap=40) for _ in range(LAYERS)]
    for p in pools:
        p.view.copy_(torch.randn(p.view.shape, generator=g, device="cuda"))
    twins = [p.view.clone() for p in pools]
    ring_pools, ring_views = gapped_rings(mamba2_ring_layout(geom, L, torch.bfloat16), LAYERS, SLOTS, "cuda", gap=40)
    mirror = GappedPool((SLOTS, 4), torch.int32, "cuda", gap=4)
    replay = ReplaySlots(geom, LAYERS, SLOTS, L, device="cuda", route=route, rings=ring_views,
                         cursor_mirror=mirror.view)
    registry = StateRegistry()
    registry.register_layers([p.view for p in pools], replay)
    hook = make_mamba2_update(mamba2_standard, registry)
    A = [-(torch.rand(H, generator=g, device="cuda") + 0.5) for _ in range(LAYERS)]
    tied = dict(D=torch.randn(H, 1, device="cuda").expand(H, P), dt_bias=torch.randn(H, 1, device="cuda").expand(H, P),
                dt_softplus=True)
    n = len(ROWS)
    x = torch.empty(LAYERS, n, H, P, dtype=torch.bfloat16, device="cuda")
    dt = torch.empty(LAYERS, n, H, dtype=torch.bfloat16, device="cuda")
    B, C = (torch.empty(LAYERS, n, G, N, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    out = torch.empty(LAYERS, n, H, P, dtype=torch.bfloat16, device="cuda")
    idx = torch.tensor(ROWS, dtype=torch.int32, device="cuda")

    def fill(rows):
        for t in (x, dt, B, C):
            t[:, :rows].copy_(torch.randn(t[:, :rows].shape, generator=g, device="cuda"))

    def step(slots, rows):  # every layer through the hook; the last one moves the cursors
        for i in range(LAYERS):
            hook(pools[i].view, x[i, :rows], dt[i, :rows, :, None].expand(rows, H, P), A[i][:, None, None].expand(H, P, N),
                 B[i, :rows], C[i, :rows], tied["D"], z=None, dt_bias=tied["dt_bias"], dt_softplus=True,
                 state_batch_indices=slots, out=out[i, :rows])

    def twin_step(slots, rows):
        for i in range(LAYERS):
            ys = mamba2_standard(twins[i], x[i, :rows], dt[i, :rows], A[i], B[i, :rows], C[i, :rows], D=tied["D"][:, 0],
                                 dt_bias=tied["dt_bias"][:, 0], dt_softplus=True, state_batch_indices=slots)
            real = slice(0, min(rows, len(REAL_SLOTS)))
            assert _rel(out[i, real], ys[real]) < 5e-3, f"layer {i}"

    _run_cycles(replay, fill, step, twin_step, idx, [*pools, mirror, *(p for ps in ring_pools.values() for p in ps)])


def test_gdn_packed_decode_step_in_cuda_graph_on_gapped_pools():
    geom = GDN_MODELS["qwen3.5-4b"].geom
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    g = torch.Generator(device="cuda").manual_seed(1)
    pools = [GappedPool((SLOTS, HV, V, K), torch.float32, "cuda", gap=40) for _ in range(LAYERS)]
    for p in pools:
        p.view.copy_(torch.randn(p.view.shape, generator=g, device="cuda") * 0.05)
    twins = [p.view.clone() for p in pools]
    ring_pools, ring_views = gapped_rings(gdn_ring_layout(geom, L, torch.float32), LAYERS, SLOTS, "cuda", gap=40)
    mirror = GappedPool((SLOTS, 4), torch.int32, "cuda", gap=4)
    replay = ReplaySlots(geom, LAYERS, SLOTS, L, device="cuda", route="output_only", rings=ring_views,
                         cursor_mirror=mirror.view)
    registry = StateRegistry()
    registry.register_layers([p.view for p in pools], replay)
    hook = make_gdn_update(lambda **kw: pytest.fail("a decode call reached the engine's kernel"), registry)
    A_log = [torch.randn(HV, generator=g, device="cuda") * 0.5 for _ in range(LAYERS)]
    dt_bias = [torch.randn(HV, generator=g, device="cuda") for _ in range(LAYERS)]
    n = len(ROWS)
    q, k = (torch.empty(LAYERS, 1, n, H, K, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    v = torch.empty(LAYERS, 1, n, HV, V, dtype=torch.bfloat16, device="cuda")
    a, b = (torch.empty(LAYERS, n, HV, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    outs = [None] * LAYERS
    idx = torch.tensor(ROWS, dtype=torch.int32, device="cuda")

    def fill(rows):
        for t in (q, k, v):
            t[:, :, :rows].copy_(torch.randn(t[:, :, :rows].shape, generator=g, device="cuda"))
        for t in (a, b):
            t[:, :rows].copy_(torch.randn(t[:, :rows].shape, generator=g, device="cuda"))

    def step(slots, rows):  # main's packed varlen call, one token per sequence
        cu = torch.arange(rows + 1, dtype=torch.int32, device="cuda")
        for i in range(LAYERS):
            outs[i] = hook(A_log=A_log[i], a=a[i, :rows], dt_bias=dt_bias[i], softplus_beta=1.0, softplus_threshold=20.0,
                           q=q[i, :, :rows], k=k[i, :, :rows], v=v[i, :, :rows], b=b[i, :rows],
                           initial_state_source=pools[i].view, initial_state_indices=slots, cu_seqlens=cu,
                           use_qk_l2norm_in_kernel=True)

    def twin_step(slots, rows):
        for i in range(LAYERS):
            o = gdn_standard(twins[i], q[i, 0, :rows], k[i, 0, :rows], v[i, 0, :rows], a[i, :rows], b[i, :rows],
                             A_log[i], dt_bias[i], None, True, slots)
            real = slice(0, min(rows, len(REAL_SLOTS)))
            assert _rel(outs[i][0, real], o[real]) < 5e-3, f"layer {i}"

    _run_cycles(replay, fill, step, twin_step, idx, [*pools, mirror, *(p for ps in ring_pools.values() for p in ps)])
