"""GDN speculative verify on the circular ring against plain fp64 decode (rollback fuzz,
as ``test_mamba2_spec``)."""

import pytest
import torch

from conftest import requires_cuda
from mamba2_harness import DEVICE, rel_err, same_bits, tolerance
from spec_harness import BAD_SPEC_CURSORS, check_accepted_tokens, cursors_with_bad_row
from trtllm_replayssm.benchmarking.spec import GDN_SPEC_CANDIDATES
from trtllm_replayssm.ops.launch import LaunchConfig
from trtllm_replayssm.cache import GDNGeometry
from trtllm_replayssm.ops.gdn.naive import gdn_step_ref, l2norm
from trtllm_replayssm.ops.gdn import spec as gdn_spec_module
from trtllm_replayssm.ops.gdn.spec import (commit_gdn_replayssm_spec, gdn_replayssm_spec_decode,
                                          reset_gdn_replayssm_spec_cursors)
from trtllm_replayssm.ops.mamba2.spec import ring_capacity

GEOM = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16)
PAD = -1


def run_gdn_spec_fuzz(T, Bh, steps, seed=0, corrupt_at=None, geom=GEOM, config=None, act_dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    slots_n, buf = 5, ring_capacity(T, Bh)
    i32 = dict(dtype=torch.int32, device=DEVICE)
    state = (torch.randn(slots_n, HV, V, K, generator=g) * 0.3).to(DEVICE)
    d_ring = torch.randn(slots_n, HV, buf, V, generator=g).to(DEVICE)
    k_ring = l2norm(torch.randn(slots_n, H, buf, K, generator=g)).to(DEVICE)
    g_ring = -torch.rand(slots_n, HV, buf, generator=g).to(DEVICE)
    wp, origin = torch.zeros(slots_n, **i32), torch.zeros(slots_n, **i32)
    flush = torch.zeros(slots_n, dtype=torch.int8, device=DEVICE)
    rows = [4, PAD, 1]
    slot_idx = torch.tensor(rows, **i32)
    reset_gdn_replayssm_spec_cursors(wp, origin, flush, slot_idx, T, Bh)
    A_log, dt_bias = torch.randn(HV, generator=g) * 0.5 - 0.5, torch.randn(HV, generator=g) * 0.5
    ref = {s: state[s].double().cpu()[None] for s in rows if s != PAD}
    tol = tolerance(torch.float32, torch.float32)
    out_tol = tol if act_dtype == torch.float32 else 1e-2  # (the outputs are rounded to act_dtype)
    flushes = {s: 0 for s in ref}
    for step in range(steps):
        if corrupt_at is not None and step == corrupt_at:
            s = rows[0]
            d_ring[s, :, (int(origin[s]) + int(wp[s]) - 1) % buf] += 50.0
        n = len(rows)
        # (the activations as act_dtype holds them; the reference takes the same values)
        q, k = (torch.randn(n, T, H, K, generator=g).to(act_dtype).float() for _ in range(2))
        v = torch.randn(n, T, HV, V, generator=g).to(act_dtype).float()
        a, b = (torch.randn(n, T, HV, generator=g).to(act_dtype).float() for _ in range(2))
        out = torch.full((n, T, HV, V), 2.5, device=DEVICE, dtype=act_dtype)
        sent = out.clone()
        flush_before = flush.cpu().clone()
        q, k, v, a, b = (t.to(act_dtype) for t in (q, k, v, a, b))
        gdn_replayssm_spec_decode(state, q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), a.to(DEVICE), b.to(DEVICE),
                                  A_log.to(DEVICE), dt_bias.to(DEVICE), initial_state_indices=slot_idx, pad_slot_id=PAD,
                                  out=out, d_ring=d_ring, k_ring=k_ring, g_ring=g_ring, write_pos=wp, origin=origin,
                                  is_flush=flush, history_len=Bh, config=config)
        accepted = torch.randint(1, T + 1, (n,), generator=g, dtype=torch.int32)
        for r, s in enumerate(rows):
            if s == PAD:
                accepted[r] = 0
                assert same_bits(out[r], sent[r]), f"step {step}: padding row written"
                continue
            if flush_before[s]:
                flushes[s] += 1
                err = rel_err(state[s].cpu(), ref[s][0])
                assert err <= tol, f"step {step} slot {s}: checkpoint error after flush {err:.3g}"
            st = ref[s]
            for t in range(T):
                st, y = gdn_step_ref(st, *(x[r:r + 1, t].float() for x in (q, k, v, a, b)), A_log, dt_bias)
                err = rel_err(out[r, t].cpu(), y[0])
                assert err <= out_tol, f"step {step} row {r} token {t}: output error {err:.3g}"
                if t + 1 == int(accepted[r]):
                    ref[s] = st
        commit_gdn_replayssm_spec(wp, origin, flush, accepted.to(DEVICE), T, Bh, slot_idx, PAD)
    return flushes


def test_rollback_fuzz():
    flushes = run_gdn_spec_fuzz(T=4, Bh=16, steps=200)
    assert min(flushes.values()) >= 1, flushes


# T in {2, 4, 8} against a history of T, 16 and 24 entries (T = 4, Bh = 16: the rollback
# fuzz), and odd sizes.
@pytest.mark.parametrize("T,Bh", [(1, 5), (2, 2), (2, 16), (2, 24), (3, 5), (4, 4), (4, 24), (8, 8), (8, 16),
                                  (8, 24)])
def test_fuzz_sizes(T, Bh):
    flushes = run_gdn_spec_fuzz(T=T, Bh=Bh, steps=20, seed=T + Bh)
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_activations(act_dtype):
    """TensorRT-LLM's case: q, k, v, a, b (and the outputs) in bf16 / fp16, where the drafts'
    tile is exact in TF32 and the state takes the two-pass split (the default config)."""
    flushes = run_gdn_spec_fuzz(T=4, Bh=8, steps=14, seed=29, act_dtype=act_dtype)
    assert min(flushes.values()) >= 1, flushes


def test_flush_rows_fold_in_their_own_launch():
    """``split_fold``: the flush rows fold first, then the verify launch (compiled without
    the fold) reads their new checkpoint with an empty history."""
    flushes = run_gdn_spec_fuzz(T=4, Bh=16, steps=40, seed=3, config=LaunchConfig(16, 4, split_fold=1))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("split_fold", [0, 1])
def test_chunked_fma_verify(monkeypatch, split_fold):
    """The chunked FMA kernel's own verify (tiles too small for tl.dot, or VERIFY_ON_DOT
    off), with the fold in the same launch or apart; two key heads of two value heads."""
    monkeypatch.setattr(gdn_spec_module, "VERIFY_ON_DOT", False)
    geom = GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16)
    flushes = run_gdn_spec_fuzz(T=3, Bh=5, steps=16, seed=9, geom=geom,
                                config=LaunchConfig(16, 4, split_fold=split_fold))
    assert min(flushes.values()) >= 1, flushes


def test_verify_on_dot_heads_and_key_chunks():
    """The tl.dot verify with two value heads a program and the state streamed in two
    chunks of key columns (K = 32), against the chunked FMA kernel's coverage above."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=32, head_v_dim=16)
    cfg = LaunchConfig(16, 1, heads_per_prog=2, split_fold=1, key_chunk=16)
    flushes = run_gdn_spec_fuzz(T=3, Bh=8, steps=16, seed=7, geom=geom, config=cfg)
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("config", [LaunchConfig(16, 1, heads_per_prog=2, split_fold=2, key_chunk=16),
                                    LaunchConfig(16, 1, heads_per_prog=2, split_fold=2, key_chunk=8),
                                    LaunchConfig(16, 1, split_fold=2)],
                         ids=["heads_and_chunks", "chunks_under_a_dot", "whole_tile"])
def test_flush_rows_take_their_whole_step_in_their_own_launch(config):
    """``split_fold = 2`` on the tl.dot verify: the flush rows fold on the way through (a
    state chunk read once, folded, stored and multiplied) in a launch of their own, one
    value head a program; the other rows in a launch compiled without the fold. Chunks of
    8 key columns, under a dot's K, take the broadcast product."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=32, head_v_dim=16)
    flushes = run_gdn_spec_fuzz(T=3, Bh=8, steps=16, seed=11, geom=geom, config=config)
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("split_fold", [1, 2])
def test_solve_in_the_verify_or_apart(monkeypatch, split_fold):
    """``SOLVE_APART`` off: every verify program forms the drafts' solve in its loop over
    value heads (the default has a launch of its own form it, through the workspace)."""
    monkeypatch.setattr(gdn_spec_module, "SOLVE_APART", False)
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=32, head_v_dim=16)
    flushes = run_gdn_spec_fuzz(T=5, Bh=8, steps=14, seed=19, geom=geom,
                                config=LaunchConfig(16, 1, heads_per_prog=2, split_fold=split_fold, key_chunk=16))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("geom,T,Bh,ring_heads", [
    (GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=32, head_v_dim=16), 3, 8, 1),
    (GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=48), 5, 6, 4)],
    ids=["chunks_one_head", "masked_v_two_key_heads"])
def test_state_product_in_a_launch_of_its_own(monkeypatch, geom, T, Bh, ring_heads):
    """``split_fold = 3``: the solve and the ring's part (``W``, ``bias``) in one launch, the
    flush rows' whole step in theirs, and ``(S_0 X) W + bias`` for the other rows in a
    lean launch: over state chunks (K = 32 in two), over rows of V that the ring part
    loops through in blocks (V = 48: a masked tail), a value head or a key head's two a
    program in the ring part."""
    monkeypatch.setattr(gdn_spec_module, "GDN_STATE_PRODUCT_COLS", 16)
    monkeypatch.setattr(gdn_spec_module, "GDN_RING_PART_ROWS", 32)
    monkeypatch.setattr(gdn_spec_module, "GDN_RING_PART_HEADS", ring_heads)
    flushes = run_gdn_spec_fuzz(T=T, Bh=Bh, steps=16, seed=23, geom=geom,
                                config=LaunchConfig(16, 1, split_fold=3, key_chunk=16))
    assert min(flushes.values()) >= 1, flushes


def test_workspace_is_checked():
    """The solve launch's workspace: too small raises before any launch; one larger than
    needed is used from its start."""
    H, HV, K, V, T, Bh, Bsz = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim, 2, 4, 2
    buf = ring_capacity(T, Bh)
    rand = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    need = gdn_spec_module.gdn_spec_workspace_numel(Bsz, T, HV, V)
    assert need == Bsz * HV * (16 * 16 + 2 * T * V)
    kw = dict(d_ring=torch.zeros(Bsz, HV, buf, V, device=DEVICE), k_ring=torch.zeros(Bsz, H, buf, K, device=DEVICE),
              g_ring=torch.zeros(Bsz, HV, buf, device=DEVICE), history_len=Bh,
              write_pos=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
              origin=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
              is_flush=torch.zeros(Bsz, dtype=torch.int8, device=DEVICE))
    args = (torch.zeros(Bsz, HV, V, K, device=DEVICE), rand(Bsz, T, H, K), rand(Bsz, T, H, K), rand(Bsz, T, HV, V),
            rand(Bsz, T, HV), rand(Bsz, T, HV), rand(HV), rand(HV))
    with pytest.raises(ValueError, match="workspace must hold at least"):
        gdn_replayssm_spec_decode(*args, **kw, workspace=torch.empty(need - 1, device=DEVICE))
    out = gdn_replayssm_spec_decode(*args, **kw, workspace=torch.full((need + 7,), float("nan"), device=DEVICE))
    assert not torch.isnan(out).any()


def test_strided_indices_are_rejected():
    """``initial_state_indices`` with a stride raises before any launch (the verify and the
    standard path read it packed); nothing is written."""
    from trtllm_replayssm.ops.gdn.spec_standard import gdn_spec_standard

    H, HV, K, V, T, Bh, Bsz = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim, 2, 4, 2
    buf = ring_capacity(T, Bh)
    rand = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    state = rand(Bsz, HV, V, K)
    qkv = (rand(Bsz, T, H, K), rand(Bsz, T, H, K), rand(Bsz, T, HV, V), rand(Bsz, T, HV), rand(Bsz, T, HV), rand(HV),
           rand(HV))
    strided = torch.tensor([1, 0, 0, 0], dtype=torch.int32, device=DEVICE)[::2]
    before = state.clone()
    with pytest.raises(ValueError, match="initial_state_indices must have unit stride"):
        gdn_replayssm_spec_decode(state, *qkv, d_ring=torch.zeros(Bsz, HV, buf, V, device=DEVICE),
                                  k_ring=torch.zeros(Bsz, H, buf, K, device=DEVICE),
                                  g_ring=torch.zeros(Bsz, HV, buf, device=DEVICE), history_len=Bh,
                                  write_pos=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
                                  origin=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
                                  is_flush=torch.zeros(Bsz, dtype=torch.int8, device=DEVICE),
                                  initial_state_indices=strided)
    with pytest.raises(ValueError, match="initial_state_indices must have unit stride"):
        gdn_spec_standard(state, *qkv, initial_state_indices=strided,
                          intermediate_states=torch.zeros(Bsz, T, HV, V, K, device=DEVICE))
    assert torch.equal(state, before)


def test_bad_split_fold_is_rejected():
    with pytest.raises(ValueError, match="split_fold"):
        run_gdn_spec_fuzz(T=2, Bh=2, steps=1, config=LaunchConfig(16, 1, split_fold=4))


@requires_cuda
@pytest.mark.parametrize("config", GDN_SPEC_CANDIDATES, ids=str)
def test_cuda_real_shapes_every_candidate(config):
    """Qwen3.5's head shape (K = V = 128) with every tuning candidate: the matmul fold
    (tf32x3) on the GPU, flushes included."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=128, head_v_dim=128)
    flushes = run_gdn_spec_fuzz(T=4, Bh=16, steps=12, geom=geom, config=config)
    assert min(flushes.values()) >= 1, flushes


@requires_cuda
@pytest.mark.parametrize("config", GDN_SPEC_CANDIDATES[:3], ids=str)
def test_cuda_real_shapes_bf16_activations(config):
    """Qwen3.5's head shape with bf16 activations (the drafts' tile exact in TF32: the
    state's two-pass split, the Gram on one bf16 pass), flushes included."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=128, head_v_dim=128)
    flushes = run_gdn_spec_fuzz(T=4, Bh=16, steps=12, geom=geom, config=config, act_dtype=torch.bfloat16)
    assert min(flushes.values()) >= 1, flushes


def test_programmatic_launch_only_on_a_gpu(monkeypatch):
    """``GDN_SPEC_PDL`` takes effect on a GPU of sm_90 or later under Triton's JIT only:
    not in the interpreter, nor where the AOT build records or the AOT backend launches
    (its cubins carry no griddepcontrol, which sm_80 lacks)."""
    from trtllm_replayssm.ops.launch import launcher_in_front

    monkeypatch.setattr(gdn_spec_module, "GDN_SPEC_PDL", True)
    limit = gdn_spec_module.GDN_SPEC_PDL_MAX_HEAD_ROWS
    assert not gdn_spec_module.programmatic_launch(torch.device("cpu"), 1)
    assert not gdn_spec_module.programmatic_launch(torch.device("meta"), 1)
    if torch.cuda.is_available():
        cuda = torch.device("cuda")
        assert gdn_spec_module.programmatic_launch(cuda, limit) == (torch.cuda.get_device_capability()[0] >= 9)
        assert not gdn_spec_module.programmatic_launch(cuda, limit + 1)
        passing = lambda kernel, grid, kwargs: False  # noqa: E731 (a launcher in front of the JIT: the AOT backend's place)
        with launcher_in_front(passing):
            assert not gdn_spec_module.programmatic_launch(cuda, 1)
    flushes = run_gdn_spec_fuzz(T=3, Bh=5, steps=8, seed=2, config=LaunchConfig(16, 1, split_fold=3))
    assert min(flushes.values()) >= 1, flushes


@requires_cuda
@pytest.mark.parametrize("batch", [8, 96], ids=["below_the_caps", "capped"])
def test_cuda_programmatic_launch_in_a_graph_equals_plain(monkeypatch, batch):
    """The state product as a programmatic dependent launch of the ring part
    (``GDN_SPEC_PDL``), captured in a CUDA graph over verify + commit steps with the rows
    flushing, gives the plain launches' outputs, rings and states bit for bit."""
    from trtllm_replayssm.benchmarking.spec import GDNSpecRig, SpecCase
    from trtllm_replayssm.benchmarking.timing import capture

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    geom = GDNGeometry(num_k_heads=2, num_v_heads=8, head_k_dim=128, head_v_dim=128)
    rig = GDNSpecRig(SpecCase("qwen3.5-122b", geom, batch, 4, 16, 3), n_layers=1)
    rig.config = gdn_spec_module.GDN_SPEC_CONFIG  # (split_fold 3 at every batch)
    start = [t.clone() for t in (rig.state, rig.d_ring, rig.k_ring, rig.g_ring)]
    results = []
    for pdl in (False, True):
        monkeypatch.setattr(gdn_spec_module, "GDN_SPEC_PDL", pdl)
        for t, t0 in zip((rig.state, rig.d_ring, rig.k_ring, rig.g_ring), start):
            t.copy_(t0)
        capture(rig.replay_fn(12), warmup=0).replay()
        torch.cuda.synchronize()
        results.append([t.clone() for t in (rig.step["out"], rig.state, rig.d_ring, rig.k_ring, rig.g_ring)])
    assert not torch.isnan(results[1][0]).any()
    for plain, programmatic in zip(*results):
        assert torch.equal(plain, programmatic)


def test_corrupted_ring_is_detected():
    with pytest.raises(AssertionError, match="error"):
        run_gdn_spec_fuzz(T=4, Bh=16, steps=10, seed=5, corrupt_at=3)


def test_standard_spec_baseline_with_promote():
    from trtllm_replayssm.ops.gdn.spec_standard import gdn_spec_standard, promote_spec_state

    g = torch.Generator().manual_seed(11)
    H, HV, K, V, T = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim, 3
    state = (torch.randn(4, HV, V, K, generator=g) * 0.3).to(DEVICE)
    inter = torch.zeros(4, T, HV, V, K, device=DEVICE)
    rows = torch.tensor([2, PAD, 0], dtype=torch.int32, device=DEVICE)
    A_log, dt_bias = torch.randn(HV, generator=g) * 0.5 - 0.5, torch.randn(HV, generator=g) * 0.5
    ref = {s: state[s].double().cpu()[None] for s in (2, 0)}
    untouched = state[[1, 3]].clone()
    for step in range(5):
        q, k = torch.randn(3, T, H, K, generator=g), torch.randn(3, T, H, K, generator=g)
        v, a, b = torch.randn(3, T, HV, V, generator=g), torch.randn(3, T, HV, generator=g), torch.randn(3, T, HV, generator=g)
        out = torch.zeros(3, T, HV, V, device=DEVICE)
        gdn_spec_standard(state, q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), a.to(DEVICE), b.to(DEVICE), A_log.to(DEVICE),
                          dt_bias.to(DEVICE), initial_state_indices=rows, out=out, intermediate_states=inter)
        accepted = torch.tensor([1 + step % T, 0, T], dtype=torch.int32)
        for r, s in ((0, 2), (2, 0)):
            st = ref[s]
            for t in range(T):
                st, y = gdn_step_ref(st, q[r:r + 1, t], k[r:r + 1, t], v[r:r + 1, t], a[r:r + 1, t], b[r:r + 1, t],
                                     A_log, dt_bias)
                assert rel_err(out[r, t].cpu(), y[0]) <= 2e-5
                if t + 1 == int(accepted[r]):
                    ref[s] = st
        promote_spec_state(state, inter, accepted.to(DEVICE), rows)
        for s in (2, 0):
            assert rel_err(state[s].cpu(), ref[s][0]) <= 2e-5
    assert torch.equal(state[[1, 3]], untouched)


@pytest.mark.parametrize("bad_cursor", BAD_SPEC_CURSORS.values(), ids=BAD_SPEC_CURSORS.keys())
@pytest.mark.parametrize("split_fold", [1, 2, 3])
def test_bad_slot_or_cursor_gives_nan_and_changes_nothing(split_fold, bad_cursor):
    """A row whose slot is out of range or whose cursors are (``BAD_SPEC_CURSORS``) gets NaN
    outputs (from one launch: the flush rows' own launch of split_fold 2 skips it) and
    leaves its state and ring alone; the good row is served."""
    H, HV, K, V, T, Bh = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim, 2, 4
    buf = ring_capacity(T, Bh)
    state = torch.randn(3, HV, V, K, device=DEVICE)
    rings = dict(d_ring=torch.zeros(3, HV, buf, V, device=DEVICE), k_ring=torch.zeros(3, H, buf, K, device=DEVICE),
                 g_ring=torch.zeros(3, HV, buf, device=DEVICE))
    cur = cursors_with_bad_row(bad_cursor, Bh, buf)
    before = state.clone()
    rand = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    out = gdn_replayssm_spec_decode(
        state, rand(3, T, H, K), rand(3, T, H, K), rand(3, T, HV, V), rand(3, T, HV), rand(3, T, HV), rand(HV), rand(HV),
        initial_state_indices=torch.tensor([0, 1, 7], dtype=torch.int32, device=DEVICE), history_len=Bh, **rings,
        **cur, config=LaunchConfig(16, 1, split_fold=split_fold))
    assert not torch.isnan(out[0]).any() and torch.isnan(out[1]).all() and torch.isnan(out[2]).all()
    assert torch.equal(state[1:], before[1:]) and torch.equal(rings["d_ring"][1:], torch.zeros_like(rings["d_ring"][1:]))


@pytest.mark.parametrize("config", [None, gdn_spec_module.GDN_SPEC_CONFIG], ids=["default", "split_fold_3"])
def test_accepted_outputs_equal_the_autoregressive_kernels(config):
    """As ``test_mamba2_spec``'s test of this name: the accepted outputs against the GDN
    standard kernel and autoregressive replay kernel, token by token."""
    from trtllm_replayssm.cache import GDNReplayCache
    from trtllm_replayssm.ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update

    T, Bh, L, steps = 4, 8, 6, 20
    g = torch.Generator().manual_seed(23)
    H, HV, K, V = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim
    slots_n, buf = 6, ring_capacity(T, Bh)
    i32 = dict(dtype=torch.int32, device=DEVICE)
    start = (torch.randn(slots_n, HV, V, K, generator=g) * 0.3).to(DEVICE)
    spec_state, std_state = start.clone(), start.clone()
    ar = GDNReplayCache(GEOM, 1, slots_n, L, torch.float32, device=DEVICE)
    ar.ssm_state[0].copy_(start)
    rings = dict(d_ring=torch.zeros(slots_n, HV, buf, V, device=DEVICE), k_ring=torch.zeros(slots_n, H, buf, K, device=DEVICE),
                 g_ring=torch.zeros(slots_n, HV, buf, device=DEVICE))
    wp, origin = torch.zeros(slots_n, **i32), torch.zeros(slots_n, **i32)
    flush = torch.zeros(slots_n, dtype=torch.int8, device=DEVICE)
    rows = [0, PAD, 2, 4]
    reset_gdn_replayssm_spec_cursors(wp, origin, flush, torch.tensor(rows, **i32), T, Bh, PAD)
    ar.reset(torch.tensor(rows, **i32), PAD)
    A_log, dt_bias = (torch.randn(HV, generator=g) * 0.5 - 0.5).to(DEVICE), (torch.randn(HV, generator=g) * 0.5).to(DEVICE)
    tol = tolerance(torch.float32, torch.float32)
    spec_flushes, ar_folds = 0, 0
    for step in range(steps):
        if step == 7:  # a request joins in the padded row's place
            rows[1] = 5
            reset_gdn_replayssm_spec_cursors(wp, origin, flush, torch.tensor([5], **i32), T, Bh, PAD)
            ar.reset(torch.tensor([5], **i32), PAD)
        n = len(rows)
        q, k = (torch.randn(n, T, H, K, generator=g).to(DEVICE) for _ in range(2))
        v = torch.randn(n, T, HV, V, generator=g).to(DEVICE)
        a, b = (torch.randn(n, T, HV, generator=g).to(DEVICE) for _ in range(2))
        spec_flushes += int(flush[[s for s in rows if s != PAD]].sum())
        out = gdn_replayssm_spec_decode(spec_state, q, k, v, a, b, A_log, dt_bias, initial_state_indices=torch.tensor(
            rows, **i32), pad_slot_id=PAD, write_pos=wp, origin=origin, is_flush=flush, history_len=Bh,
            config=config, **rings)
        accepted = torch.randint(1, T + 1, (n,), generator=g, dtype=torch.int32)
        accepted[[r for r, s in enumerate(rows) if s == PAD]] = 0
        def decode_step(t, live):  # (an accepted token; the rows that did not accept it are padding)
            nonlocal ar_folds
            ar_folds += int(((ar.write_pos[live.clamp(min=0).long()] == L - 1) & (live >= 0)).sum())
            step_in = (q[:, t], k[:, t], v[:, t], a[:, t], b[:, t], A_log, dt_bias)
            y_std = fused_sigmoid_gating_delta_rule_update(std_state, *step_in, initial_state_indices=live,
                                                           pad_slot_id=PAD)
            y_ar = fused_recurrent_gated_delta_rule_replayssm(ar.ssm_state[0], *step_in, initial_state_indices=live,
                                                              pad_slot_id=PAD, route="output_only", **ar.ring_kwargs(0))
            ar.advance(live, route="output_only", pad_slot_id=PAD)
            return {"standard": y_std, "replay": y_ar}

        check_accepted_tokens(out, rows, accepted, T, PAD, decode_step, tol, f"step {step}")
        commit_gdn_replayssm_spec(wp, origin, flush, accepted.to(DEVICE), T, Bh, torch.tensor(rows, **i32), PAD)
    assert spec_flushes >= 2 * 3 and ar_folds >= 2 * 3, (spec_flushes, ar_folds)
