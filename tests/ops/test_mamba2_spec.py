"""Speculative verify on the circular ring against plain fp64 autoregressive decode.

A rollback fuzz: every step verifies T drafted tokens per row, all T outputs must equal
the recurrence through the drafted prefix, a random number of tokens is accepted, and
after every flush the checkpoint must equal the state at the folded position. Rows are
at different fill levels, one row is padding, a row moves to a fresh slot mid-run.
"""

import pytest
import torch

from conftest import requires_cuda
from mamba2_harness import DEVICE, rel_err, same_bits, tolerance
from spec_harness import BAD_SPEC_CURSORS, check_accepted_tokens, cursors_with_bad_row
from trtllm_replayssm.benchmarking.spec import MAMBA2_SPEC_CANDIDATES
from trtllm_replayssm.ops.launch import LaunchConfig
from trtllm_replayssm.cache import Mamba2Geometry
from trtllm_replayssm.ops.mamba2.naive import mamba2_step_ref
from trtllm_replayssm.ops.mamba2 import spec as m2_spec_module
from trtllm_replayssm.ops.mamba2.spec import (
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    ring_capacity,
    selective_state_update_replayssm_spec,
)

GEOM = Mamba2Geometry(nheads=2, headdim=16, dstate=16, ngroups=1)
PAD = -1


def run_spec_fuzz(T: int, Bh: int, steps: int, seed: int = 0, corrupt_at=None, move_row_at=None, geom=GEOM,
                  config=None, act_dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    slots_n, buf = 6, ring_capacity(T, Bh)
    i32 = dict(dtype=torch.int32, device=DEVICE)
    state = torch.randn(slots_n, H, P, N, generator=g).to(DEVICE)
    x_ring = torch.randn(slots_n, H, buf, P, generator=g).to(DEVICE, act_dtype)  # garbage the masks must ignore
    dt_ring = torch.rand(slots_n, H, buf, generator=g).to(DEVICE)
    B_ring = torch.randn(slots_n, G, buf, N, generator=g).to(DEVICE, act_dtype)
    wp, origin, flush = (torch.zeros(slots_n, **i32), torch.zeros(slots_n, **i32),
                         torch.zeros(slots_n, dtype=torch.int8, device=DEVICE))
    rows = [0, PAD, 2, 4]
    slot_idx = torch.tensor(rows, **i32)
    reset_replayssm_spec_cursors(wp, origin, flush, slot_idx, T, Bh)
    A = -(torch.rand(H, generator=g) * 0.8 + 0.2)
    dt_bias = torch.randn(H, generator=g) * 0.5 - 1.0
    D = torch.randn(H, generator=g)
    ref = {s: state[s].double().cpu()[None] for s in rows if s != PAD}
    # The checkpoint is fp32 whatever the activations; bf16 outputs carry their rounding.
    tol = tolerance(torch.float32, torch.float32)
    out_tol = tol if act_dtype == torch.float32 else 1e-2
    flushes = {r: 0 for r, s in enumerate(rows) if s != PAD}
    for step in range(steps):
        if move_row_at is not None and step == move_row_at:  # row 2 leaves; a new request takes slot 5
            rows[2] = 5
            slot_idx = torch.tensor(rows, **i32)
            reset_replayssm_spec_cursors(wp, origin, flush, torch.tensor([5], **i32), T, Bh)
            ref[5] = state[5].double().cpu()[None]
        if corrupt_at is not None and step == corrupt_at:
            s = rows[0]
            j = (int(origin[s]) + int(wp[s]) - 1) % buf  # the newest committed entry
            x_ring[s, :, j] += 50.0
        # Drawn in the activation dtype; the reference reads the same (rounded) values.
        x, dt, Bm, Cm, z = (torch.randn(len(rows), T, *shape, generator=g).to(act_dtype).float()
                            for shape in ((H, P), (H,), (G, N), (G, N), (H, P)))
        out = torch.full((len(rows), T, H, P), 3.25, device=DEVICE, dtype=act_dtype)
        flush_before = flush.cpu().clone()
        sent = out.clone()
        selective_state_update_replayssm_spec(
            state, *(t.to(DEVICE, act_dtype) for t in (x, dt)), A.to(DEVICE),
            *(t.to(DEVICE, act_dtype) for t in (Bm, Cm)), D=D.to(DEVICE), z=z.to(DEVICE, act_dtype),
            dt_bias=dt_bias.to(DEVICE), dt_softplus=True, state_batch_indices=slot_idx,
            pad_slot_id=PAD, out=out, x_ring=x_ring, dt_ring=dt_ring, B_ring=B_ring, write_pos=wp, origin=origin,
            is_flush=flush, history_len=Bh, config=config)
        accepted = torch.randint(1, T + 1, (len(rows),), generator=g, dtype=torch.int32)
        for r, s in enumerate(rows):
            if s == PAD:
                accepted[r] = 0
                assert same_bits(out[r], sent[r]), f"step {step}: padding row written"
                continue
            if flush_before[s]:
                flushes[r] += 1
                err = rel_err(state[s].cpu(), ref[s][0])
                assert err <= tol, f"step {step} slot {s}: checkpoint error after flush {err:.3g}"
            st = ref[s]
            for t in range(T):
                st, y = mamba2_step_ref(st, x[r:r + 1, t], dt[r:r + 1, t], A, Bm[r:r + 1, t], Cm[r:r + 1, t], D=D,
                                        z=z[r:r + 1, t], dt_bias=dt_bias, dt_softplus=True)
                err = rel_err(out[r, t].cpu(), y[0])
                assert err <= out_tol, f"step {step} row {r} token {t}: output error {err:.3g}"
                if t + 1 == int(accepted[r]):
                    ref[s] = st
        commit_replayssm_spec(wp, origin, flush, accepted.to(DEVICE), T, Bh, slot_idx, PAD)
    return flushes


def test_rollback_fuzz_200_steps():
    flushes = run_spec_fuzz(T=4, Bh=16, steps=200, move_row_at=120)
    assert min(flushes.values()) >= 1, flushes


# T in {2, 4, 8} against a history of T, 16 and 24 entries (T = 4, Bh = 16: the rollback fuzz).
@pytest.mark.parametrize("T,Bh", [(2, 2), (2, 16), (2, 24), (4, 4), (4, 24), (8, 8), (8, 16), (8, 24)])
def test_fuzz_sizes(T, Bh):
    flushes = run_spec_fuzz(T=T, Bh=Bh, steps=24, seed=T * 100 + Bh)
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("act_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_activations(act_dtype):
    """bf16/fp16 activations: the B.C products run on tl.dot in that dtype (native_dot) and
    the state and weights take the TF32 split; the checkpoint is still held to fp32."""
    flushes = run_spec_fuzz(T=4, Bh=8, steps=16, seed=21, act_dtype=act_dtype)
    assert min(flushes.values()) >= 1, flushes


def test_small_tiles_without_tl_dot():
    """Tiles below 16 (headdim 8, dstate 8): the products over tokens take the broadcast
    path instead of tl.dot, with a token axis of next_pow2(T) instead of 16."""
    flushes = run_spec_fuzz(T=3, Bh=5, steps=16, seed=9, geom=Mamba2Geometry(nheads=2, headdim=8, dstate=8, ngroups=1))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("config,geom", [
    (LaunchConfig(16, 1), GEOM),
    (LaunchConfig(16, 1, heads_per_prog=2), GEOM),
    (LaunchConfig(16, 1, heads_per_prog=4), Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)),  # -> 2
    (LaunchConfig(16, 1, heads_per_prog=2, split_fold=1), Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)),
    (LaunchConfig(16, 1, heads_per_prog=2, split_fold=3), Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)),
], ids=["hpp1_fold_in_verify", "hpp2", "hpp4_of_2_per_group", "hpp2_split_fold", "hpp2_state_apart"])
def test_heads_of_a_group_in_one_program(config, geom):
    """``heads_per_prog``: one program loops over heads of one group, sharing the group's
    B.C products (cut to the heads a group has)."""
    flushes = run_spec_fuzz(T=4, Bh=8, steps=16, seed=17, geom=geom, config=config)
    assert min(flushes.values()) >= 1, flushes


def test_flush_rows_fold_in_their_own_launch():
    """``split_fold``: the flush rows fold first, then the verify launch (compiled without
    the fold) reads their new checkpoint with an empty history."""
    flushes = run_spec_fuzz(T=4, Bh=16, steps=40, seed=3, move_row_at=20, config=LaunchConfig(16, 4, split_fold=1))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("rows, cols", [(16, 16), (32, 16), (16, 32)])
def test_state_product_launch_tiles(monkeypatch, rows, cols):
    """split_fold 3: the state's product in a launch of its own, over tiles of headdim rows
    (48: a tile of 32 is masked) and dstate columns (a loop of two steps at 16), its sum
    with the ring's part (through the workspace) checked against fp64 every token."""
    monkeypatch.setattr(m2_spec_module, "STATE_PRODUCT_ROWS", rows)
    monkeypatch.setattr(m2_spec_module, "STATE_PRODUCT_COLS", cols)
    flushes = run_spec_fuzz(T=3, Bh=6, steps=12, seed=37, geom=Mamba2Geometry(nheads=4, headdim=48, dstate=32,
                                                                               ngroups=2),
                            config=LaunchConfig(16, 1, heads_per_prog=2, split_fold=3), act_dtype=torch.bfloat16)
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("headdim,dstate", [(24, 16), (16, 12), (24, 12)],
                         ids=["rows_past_P", "cols_past_N", "both_past"])
@pytest.mark.parametrize("config", [LaunchConfig(16, 1), LaunchConfig(16, 1, split_fold=1, key_chunk=8),
                                    LaunchConfig(16, 1, split_fold=3)],
                         ids=["fold_in_verify", "state_in_chunks", "state_apart"])
def test_tiles_whose_rows_or_columns_run_past_the_sizes(monkeypatch, config, headdim, dstate):
    """The row and column masks are dropped apart (``EVEN_ROWS`` / ``EVEN_COLS``, as on the
    autoregressive kernels): headdim 24 in tiles of 16 rows, a dstate of 12 in a 16-column
    tile, and both, in the verify, its state streamed in chunks and the state's product."""
    monkeypatch.setattr(m2_spec_module, "STATE_PRODUCT_ROWS", 16)
    monkeypatch.setattr(m2_spec_module, "STATE_PRODUCT_COLS", 8)
    flushes = run_spec_fuzz(T=3, Bh=5, steps=10, seed=41, geom=Mamba2Geometry(nheads=2, headdim=headdim,
                                                                              dstate=dstate, ngroups=1),
                            config=config)
    assert min(flushes.values()) >= 1, flushes


def test_workspace_is_checked():
    """split_fold 3's workspace: too small or of another dtype raises before any launch."""
    H, P, N, G, T, Bh, Bsz = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups, 2, 4, 2
    buf = ring_capacity(T, Bh)
    need = m2_spec_module.spec_workspace_numel(Bsz, T, H, P)
    assert need == Bsz * T * H * (P + 1)
    args = (torch.zeros(Bsz, H, P, N, device=DEVICE), torch.randn(Bsz, T, H, P, device=DEVICE),
            torch.randn(Bsz, T, H, device=DEVICE), -torch.rand(H, device=DEVICE), torch.randn(Bsz, T, G, N, device=DEVICE),
            torch.randn(Bsz, T, G, N, device=DEVICE))
    kw = dict(x_ring=torch.zeros(Bsz, H, buf, P, device=DEVICE), dt_ring=torch.zeros(Bsz, H, buf, device=DEVICE),
              B_ring=torch.zeros(Bsz, G, buf, N, device=DEVICE), history_len=Bh,
              write_pos=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
              origin=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
              is_flush=torch.zeros(Bsz, dtype=torch.int8, device=DEVICE), config=LaunchConfig(16, 1, split_fold=3))
    with pytest.raises(ValueError, match="workspace must hold at least"):
        selective_state_update_replayssm_spec(*args, **kw, workspace=torch.empty(need - 1, device=DEVICE))
    with pytest.raises(TypeError, match="workspace"):
        selective_state_update_replayssm_spec(*args, **kw, workspace=torch.empty(need, device=DEVICE,
                                                                                 dtype=torch.float16))
    out = selective_state_update_replayssm_spec(*args, **kw, workspace=torch.empty(need + 5, device=DEVICE))
    assert not torch.isnan(out).any()


def test_fold_launch_with_a_config_of_its_own(monkeypatch):
    """``SPEC_FOLD_CONFIG``: the fold-only launch takes its own rows a program (here 32,
    the whole headdim, against the verify's 16), so its grid differs from the verify's."""
    monkeypatch.setattr(m2_spec_module, "SPEC_FOLD_CONFIG", LaunchConfig(32, 2))
    flushes = run_spec_fuzz(T=4, Bh=8, steps=16, seed=29, geom=Mamba2Geometry(nheads=4, headdim=32, dstate=16,
                                                                               ngroups=2),
                            config=LaunchConfig(16, 1, heads_per_prog=2, split_fold=1))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("small_on_fma", [False, True], ids=["small_split_tf32", "small_on_fma"])
@pytest.mark.parametrize("act_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_state_streamed_in_dstate_chunks(monkeypatch, small_on_fma, act_dtype):
    """``key_chunk`` on a verify launched apart from the fold: the state goes through
    ``S_0 C^T`` in chunks of dstate columns (32 in two); ``SMALL_ON_FMA``: the x tiles'
    products as fp32 FMAs."""
    monkeypatch.setattr(m2_spec_module, "SMALL_ON_FMA", small_on_fma)
    cfg = LaunchConfig(16, 1, heads_per_prog=2, split_fold=1, key_chunk=16)
    flushes = run_spec_fuzz(T=4, Bh=8, steps=16, seed=23, geom=Mamba2Geometry(nheads=4, headdim=16, dstate=32,
                                                                               ngroups=2),
                            config=cfg, act_dtype=act_dtype)
    assert min(flushes.values()) >= 1, flushes


@requires_cuda
@pytest.mark.parametrize("config", MAMBA2_SPEC_CANDIDATES, ids=str)
def test_cuda_real_shapes_every_candidate(config):
    """Super's head shape (P 64, N 128) with every tuning candidate: the fold and the
    products over tokens on tl.dot on the GPU, flushes included."""
    flushes = run_spec_fuzz(T=4, Bh=16, steps=12, geom=Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2),
                            config=config)
    assert min(flushes.values()) >= 1, flushes


@requires_cuda
@pytest.mark.parametrize("config", MAMBA2_SPEC_CANDIDATES[:3], ids=str)
def test_cuda_real_shapes_bf16_activations(config):
    """TensorRT-LLM's case: Super's head shape with bf16 activations, where the B.C products
    run on tl.dot in bf16 and the fold splits for TF32."""
    flushes = run_spec_fuzz(T=4, Bh=16, steps=12, geom=Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2),
                            config=config, act_dtype=torch.bfloat16)
    assert min(flushes.values()) >= 1, flushes


def test_corrupted_ring_is_detected():
    with pytest.raises(AssertionError, match="error"):
        run_spec_fuzz(T=4, Bh=16, steps=12, seed=3, corrupt_at=3)


def test_bad_split_fold_is_rejected():
    with pytest.raises(ValueError, match="split_fold"):
        run_spec_fuzz(T=2, Bh=2, steps=1, config=LaunchConfig(16, 1, split_fold=4))


def test_bad_sizes():
    wp = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    fl = torch.zeros(4, dtype=torch.int8, device=DEVICE)
    with pytest.raises(ValueError, match="history budget"):
        reset_replayssm_spec_cursors(wp, wp.clone(), fl, wp[:1], num_tokens=4, history_len=3)
    with pytest.raises(ValueError, match="T \\(tokens per verify step\\)"):
        commit_replayssm_spec(wp, wp.clone(), fl, wp, num_tokens=9, history_len=16)
    with pytest.raises(TypeError, match="is_flush must have dtype"):
        commit_replayssm_spec(wp, wp.clone(), wp.clone(), wp, num_tokens=4, history_len=16)
    with pytest.raises(TypeError, match="history budget Bh must be an int"):
        commit_replayssm_spec(wp, wp.clone(), fl, wp, num_tokens=4, history_len=16.0)


def test_cursor_ops_against_a_plain_reference():
    """commit and reset over 300 rows (three programs of 128) with random cursors, padding,
    slots outside the pool and accepted counts outside [1, T], which leave their slot
    alone. The flush test ``wp + 2T > Bh + T`` meets its boundary: after a commit at wp = 2
    (T = 2, Bh = 4), after a reset (wp = 0) where T = Bh."""
    g = torch.Generator().manual_seed(5)
    T, Bh = 2, 4
    slots, batch, buf = 320, 300, ring_capacity(T, Bh)
    i32 = dict(dtype=torch.int32)
    wp = torch.randint(0, Bh + 1, (slots,), generator=g, **i32)
    origin = torch.randint(0, buf, (slots,), generator=g, **i32)
    flush = torch.randint(0, 2, (slots,), generator=g, dtype=torch.int8)
    rows = torch.randperm(slots, generator=g)[:batch].to(torch.int32)
    rows[:3] = torch.tensor([PAD, slots, -2], **i32)
    accepted = torch.randint(-1, T + 2, (batch,), generator=g, **i32)
    expected = [wp.clone(), origin.clone(), flush.clone()]
    for r, c in zip(rows.tolist(), accepted.tolist()):
        if 0 <= r < slots and 1 <= c <= T:
            was_flush = bool(flush[r])
            expected[1][r] = (origin[r] + wp[r]) % buf if was_flush else origin[r]
            expected[0][r] = c if was_flush else wp[r] + c
            expected[2][r] = int(expected[0][r] + 2 * T > Bh + T)
    cursors = [t.to(DEVICE) for t in (wp, origin, flush)]
    commit_replayssm_spec(*cursors, accepted.to(DEVICE), T, Bh, rows.to(DEVICE), PAD)
    for name, got, want in zip(("write_pos", "origin", "is_flush"), cursors, expected):
        assert torch.equal(got.cpu(), want), f"commit: {name}"
    reset_replayssm_spec_cursors(*cursors, rows.to(DEVICE), T, T)
    fresh = [r for r in rows.tolist() if 0 <= r < slots]
    expected[0][fresh], expected[1][fresh], expected[2][fresh] = 0, 0, 0
    for name, got, want in zip(("write_pos", "origin", "is_flush"), cursors, expected):
        assert torch.equal(got.cpu(), want), f"reset: {name}"


def test_strided_token_inputs_are_rejected():
    """x whose headdim is not unit-stride (e.g. a transposed conv output) must raise, not be
    read with the flattened copy's strides."""
    from trtllm_replayssm.ops.mamba2.spec_standard import selective_state_update_spec_standard

    H, P, N, G, T, Bh, Bsz = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups, 2, 4, 2
    buf = ring_capacity(T, Bh)
    x = torch.randn(Bsz, H * P, T, device=DEVICE).transpose(1, 2).reshape(Bsz, T, H, P)  # a view, stride T along P
    assert x.stride(-1) != 1
    dt, A = torch.randn(Bsz, T, H, device=DEVICE), -torch.rand(H, device=DEVICE)
    Bm = torch.randn(Bsz, T, G, N, device=DEVICE)
    state = torch.zeros(Bsz, H, P, N, device=DEVICE)
    cur = dict(write_pos=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
               origin=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
               is_flush=torch.zeros(Bsz, dtype=torch.int8, device=DEVICE))
    with pytest.raises(ValueError, match="x"):
        selective_state_update_replayssm_spec(
            state, x, dt, A, Bm, Bm.clone(), x_ring=torch.zeros(Bsz, H, buf, P, device=DEVICE),
            dt_ring=torch.zeros(Bsz, H, buf, device=DEVICE), B_ring=torch.zeros(Bsz, G, buf, N, device=DEVICE),
            history_len=Bh, **cur)
    with pytest.raises(ValueError, match="x"):
        selective_state_update_spec_standard(state, x, dt, A, Bm, Bm.clone(),
                                             intermediate_states=torch.zeros(Bsz, T, H, P, N, device=DEVICE))


def test_strided_index_vectors_are_rejected():
    """Slot indices, accepted counts and slots with a stride (a slice such as ``t[::2]``)
    raise: the verify, the cursor ops and the standard path's promote read them packed,
    which would put rows on other rows' slots. Nothing is written."""
    from trtllm_replayssm.ops.mamba2.spec_standard import promote_spec_state

    H, P, N, G, T, Bh, Bsz = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups, 2, 4, 2
    buf = ring_capacity(T, Bh)
    x, dt = torch.randn(Bsz, T, H, P, device=DEVICE), torch.randn(Bsz, T, H, device=DEVICE)
    Bm, A = torch.randn(Bsz, T, G, N, device=DEVICE), -torch.rand(H, device=DEVICE)
    state = torch.randn(Bsz, H, P, N, device=DEVICE)
    cur = dict(write_pos=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
               origin=torch.zeros(Bsz, dtype=torch.int32, device=DEVICE),
               is_flush=torch.zeros(Bsz, dtype=torch.int8, device=DEVICE))
    strided = torch.tensor([1, 0, 0, 0], dtype=torch.int32, device=DEVICE)[::2]  # rows 0, 1 -> slots 1, 0
    before = state.clone()
    with pytest.raises(ValueError, match="state_batch_indices must have unit stride"):
        selective_state_update_replayssm_spec(
            state, x, dt, A, Bm, Bm.clone(), x_ring=torch.zeros(Bsz, H, buf, P, device=DEVICE),
            dt_ring=torch.zeros(Bsz, H, buf, device=DEVICE), B_ring=torch.zeros(Bsz, G, buf, N, device=DEVICE),
            history_len=Bh, state_batch_indices=strided, **cur)
    ones = torch.ones(Bsz, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="accepted must have unit stride"):
        commit_replayssm_spec(*cur.values(), torch.ones(2 * Bsz, dtype=torch.int32, device=DEVICE)[::2],
                              num_tokens=T, history_len=Bh)
    with pytest.raises(ValueError, match="state_batch_indices must have unit stride"):
        commit_replayssm_spec(*cur.values(), ones, num_tokens=T, history_len=Bh, state_batch_indices=strided)
    with pytest.raises(ValueError, match="slots must have unit stride"):
        reset_replayssm_spec_cursors(*cur.values(), strided, num_tokens=T, history_len=Bh)
    inter = torch.randn(Bsz, T, H, P, N, device=DEVICE)
    with pytest.raises(ValueError, match="state_batch_indices must have unit stride"):
        promote_spec_state(state, inter, ones, strided)
    with pytest.raises(ValueError, match="state_batch_indices must have shape"):
        promote_spec_state(state, inter, ones, strided[:1])
    assert torch.equal(state, before) and not any(t.any() for t in cur.values())


def test_standard_spec_baseline_with_promote():
    """The non-replay speculative path (T intermediate states + promote) against fp64."""
    from trtllm_replayssm.ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard

    g = torch.Generator().manual_seed(7)
    H, P, N, G, T = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups, 3
    state = torch.randn(5, H, P, N, generator=g).to(DEVICE)
    inter = torch.zeros(5, T, H, P, N, device=DEVICE)
    rows = torch.tensor([3, PAD, 1], dtype=torch.int32, device=DEVICE)
    A, dt_bias = -(torch.rand(H, generator=g) + 0.2), torch.randn(H, generator=g)
    ref = {s: state[s].double().cpu()[None] for s in (3, 1)}
    untouched = state[[0, 2, 4]].clone()
    for step in range(6):
        x, dt = torch.randn(3, T, H, P, generator=g), torch.randn(3, T, H, generator=g)
        Bm, Cm = torch.randn(3, T, G, N, generator=g), torch.randn(3, T, G, N, generator=g)
        out = torch.zeros(3, T, H, P, device=DEVICE)
        selective_state_update_spec_standard(state, x.to(DEVICE), dt.to(DEVICE), A.to(DEVICE), Bm.to(DEVICE),
                                             Cm.to(DEVICE), dt_bias=dt_bias.to(DEVICE), dt_softplus=True,
                                             state_batch_indices=rows, out=out, intermediate_states=inter)
        accepted = torch.tensor([1 + step % T, 0, T], dtype=torch.int32)
        for r, s in ((0, 3), (2, 1)):
            st = ref[s]
            for t in range(T):
                st, y = mamba2_step_ref(st, x[r:r + 1, t], dt[r:r + 1, t], A, Bm[r:r + 1, t], Cm[r:r + 1, t],
                                        dt_bias=dt_bias, dt_softplus=True)
                assert rel_err(out[r, t].cpu(), y[0]) <= 2e-5
                if t + 1 == int(accepted[r]):
                    ref[s] = st
        promote_spec_state(state, inter, accepted.to(DEVICE), rows)
        for s in (3, 1):
            assert rel_err(state[s].cpu(), ref[s][0]) <= 2e-5
    assert torch.equal(state[[0, 2, 4]], untouched)


@pytest.mark.parametrize("config, fold_config", [
    (LaunchConfig(16, 1, split_fold=2), None),
    (LaunchConfig(16, 1, heads_per_prog=2, split_fold=2), None),
    (LaunchConfig(16, 1, heads_per_prog=2, split_fold=2, key_chunk=16), LaunchConfig(32, 2, heads_per_prog=1)),
], ids=["one_head", "heads_of_a_group", "streamed_rest_own_flush_config"])
def test_flush_rows_take_their_whole_step_in_their_own_launch(monkeypatch, config, fold_config):
    """``split_fold = 2``: the flush rows fold and verify in one launch (their state read
    once), the other rows in a launch compiled without the fold (which may stream the
    state in chunks); the flush launch may take rows, warps and heads of its own."""
    monkeypatch.setattr(m2_spec_module, "SPEC_FOLD_CONFIG", fold_config)
    flushes = run_spec_fuzz(T=4, Bh=8, steps=14, seed=31, move_row_at=7, config=config,
                            geom=Mamba2Geometry(nheads=4, headdim=32, dstate=32, ngroups=2))
    assert min(flushes.values()) >= 1, flushes


@pytest.mark.parametrize("split_fold", [1, 2, 3])
def test_flush_launch_takes_blocks_of_rows(monkeypatch, split_fold):
    """A launch of the flush rows alone gives each program a block of batch rows (2 here:
    rows 0-1 with the padding row, rows 2-3) and folds those that flush; a flush row of
    either block left unfolded fails the checkpoint check."""
    monkeypatch.setattr(m2_spec_module, "FLUSH_ROW_BLOCK", 2)
    monkeypatch.setattr(m2_spec_module, "FLUSH_MIN_PROGRAMS", 0)
    flushes = run_spec_fuzz(T=3, Bh=5, steps=16, seed=7, move_row_at=8,
                            config=LaunchConfig(16, 1, split_fold=split_fold))
    assert min(flushes.values()) >= 2, flushes


def test_flush_row_block_keeps_enough_programs(monkeypatch):
    monkeypatch.setattr(m2_spec_module, "FLUSH_ROW_BLOCK", 16)
    monkeypatch.setattr(m2_spec_module, "FLUSH_MIN_PROGRAMS", 4096)
    assert m2_spec_module.flush_row_block(512, 128) == 16  # Super's fold: 4 x 128 programs a row
    assert m2_spec_module.flush_row_block(128, 128) == 4  # Qwen3.5-122B's: 2 x 64
    assert m2_spec_module.flush_row_block(128, 512) == 16
    assert m2_spec_module.flush_row_block(8, 3) == 1


@pytest.mark.parametrize("bad_cursor", BAD_SPEC_CURSORS.values(), ids=BAD_SPEC_CURSORS.keys())
@pytest.mark.parametrize("split_fold, row_block", [(0, 1), (1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (3, 2)])
def test_bad_slot_or_cursor_gives_nan_and_changes_nothing(monkeypatch, split_fold, row_block, bad_cursor):
    """Row 1's cursors (``BAD_SPEC_CURSORS``) and row 2's slot are out of range. Every row
    flushing, so the bad rows reach the flush rows' launches too (with blocks of 2 rows: the
    second block's second row lies past the batch)."""
    monkeypatch.setattr(m2_spec_module, "FLUSH_ROW_BLOCK", row_block)
    monkeypatch.setattr(m2_spec_module, "FLUSH_MIN_PROGRAMS", 0)
    H, P, N, G, T, Bh = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups, 2, 4
    buf = ring_capacity(T, Bh)
    state = torch.randn(3, H, P, N, device=DEVICE)
    rings = dict(x_ring=torch.zeros(3, H, buf, P, device=DEVICE), dt_ring=torch.zeros(3, H, buf, device=DEVICE),
                 B_ring=torch.zeros(3, G, buf, N, device=DEVICE))
    cur = cursors_with_bad_row(bad_cursor, Bh, buf)
    before = state.clone()
    out = selective_state_update_replayssm_spec(
        state, torch.randn(3, T, H, P, device=DEVICE), torch.randn(3, T, H, device=DEVICE), -torch.rand(H, device=DEVICE),
        torch.randn(3, T, G, N, device=DEVICE), torch.randn(3, T, G, N, device=DEVICE),
        state_batch_indices=torch.tensor([0, 1, 7], dtype=torch.int32, device=DEVICE), history_len=Bh, **rings, **cur,
        config=LaunchConfig(16, 1, split_fold=split_fold))
    assert not torch.isnan(out[0]).any() and torch.isnan(out[1]).all() and torch.isnan(out[2]).all()
    assert torch.equal(state[1:], before[1:])
    assert torch.equal(rings["x_ring"][1:], torch.zeros_like(rings["x_ring"][1:]))


@pytest.mark.parametrize("config", [None, m2_spec_module.SPEC_CONFIG], ids=["default", "split_fold_3"])
def test_accepted_outputs_equal_the_autoregressive_kernels(config):
    """Every accepted output of a verify equals decoding the accepted tokens one at a time
    with the standard kernel and with the autoregressive replay kernel (a ring of its own
    of L entries, folding on its own schedule), over several flushes of both, with random
    acceptance, a padded row and a request that joins mid-run (rows at other fill levels)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.ops.mamba2 import selective_state_update
    from trtllm_replayssm.ops.mamba2.replay import selective_state_update_replayssm

    T, Bh, L, steps = 4, 8, 6, 20
    g = torch.Generator().manual_seed(21)
    H, P, N, G = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups
    slots_n, buf = 6, ring_capacity(T, Bh)
    i32 = dict(dtype=torch.int32, device=DEVICE)
    start = torch.randn(slots_n, H, P, N, generator=g).to(DEVICE)
    spec_state, std_state = start.clone(), start.clone()
    ar = Mamba2ReplayCache(GEOM, 1, slots_n, L, torch.float32, torch.float32, DEVICE)
    ar.ssm_state[0].copy_(start)
    rings = dict(x_ring=torch.zeros(slots_n, H, buf, P, device=DEVICE), dt_ring=torch.zeros(slots_n, H, buf, device=DEVICE),
                 B_ring=torch.zeros(slots_n, G, buf, N, device=DEVICE))
    wp, origin = torch.zeros(slots_n, **i32), torch.zeros(slots_n, **i32)
    flush = torch.zeros(slots_n, dtype=torch.int8, device=DEVICE)
    rows = [0, PAD, 2, 4]
    reset_replayssm_spec_cursors(wp, origin, flush, torch.tensor(rows, **i32), T, Bh, PAD)
    ar.reset(torch.tensor(rows, **i32), PAD)
    A = -(torch.rand(H, generator=g) * 0.8 + 0.2)
    dt_bias, D = torch.randn(H, generator=g) * 0.5 - 1.0, torch.randn(H, generator=g)
    params = dict(A=A.to(DEVICE), D=D.to(DEVICE), dt_bias=dt_bias.to(DEVICE), dt_softplus=True, pad_slot_id=PAD)
    tol = tolerance(torch.float32, torch.float32)
    spec_flushes, ar_folds = 0, 0
    for step in range(steps):
        if step == 7:  # a request joins in the padded row's place
            rows[1] = 5
            reset_replayssm_spec_cursors(wp, origin, flush, torch.tensor([5], **i32), T, Bh, PAD)
            ar.reset(torch.tensor([5], **i32), PAD)
        n = len(rows)
        x, dt, B, C, z = (torch.randn(n, T, *shape, generator=g).to(DEVICE)
                          for shape in ((H, P), (H,), (G, N), (G, N), (H, P)))
        spec_flushes += int(flush[[s for s in rows if s != PAD]].sum())
        out = selective_state_update_replayssm_spec(spec_state, x, dt, B=B, C=C, z=z, state_batch_indices=torch.tensor(
            rows, **i32), write_pos=wp, origin=origin, is_flush=flush, history_len=Bh, config=config, **rings,
            **params)
        accepted = torch.randint(1, T + 1, (n,), generator=g, dtype=torch.int32)
        accepted[[r for r, s in enumerate(rows) if s == PAD]] = 0
        def decode_step(t, live):  # (an accepted token; the rows that did not accept it are padding)
            nonlocal ar_folds
            ar_folds += int(((ar.write_pos[live.clamp(min=0).long()] == L - 1) & (live >= 0)).sum())
            step_in = dict(x=x[:, t], dt=dt[:, t], B=B[:, t], C=C[:, t], z=z[:, t], state_batch_indices=live, **params)
            y_std = selective_state_update(std_state, **step_in)
            y_ar = selective_state_update_replayssm(ar.ssm_state[0], **step_in, route="output_only", **ar.ring_kwargs(0))
            ar.advance(live, route="output_only", pad_slot_id=PAD)
            return {"standard": y_std, "replay": y_ar}

        check_accepted_tokens(out, rows, accepted, T, PAD, decode_step, tol, f"step {step}")
        commit_replayssm_spec(wp, origin, flush, accepted.to(DEVICE), T, Bh, torch.tensor(rows, **i32), PAD)
    assert spec_flushes >= 2 * 3 and ar_folds >= 2 * 3, (spec_flushes, ar_folds)
