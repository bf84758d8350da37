"""GDN decode (standard and ReplaySSM) against the fp64 recurrence, on small shapes."""

import pytest
import torch

import trtllm_replayssm as rs
from gdn_harness import GDNScenario, run_gdn_replay, run_gdn_standard
from mamba2_harness import DEVICE, SLOTS
from trtllm_replayssm.cache import GDNGeometry, GDNReplayCache
from trtllm_replayssm.ops.gdn import replay as gdn_replay, standard as gdn_standard
from trtllm_replayssm.ops.launch import LaunchConfig

GEOM = GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16)


def cycles(L: int, n: int = 3) -> int:
    return n * L + 2


@pytest.mark.parametrize("L", [1, 4, 16])
def test_replay_matches_recurrence_over_cycles(L):
    res = run_gdn_replay(GDNScenario(GEOM, L), cycles(L))
    assert all(res.flushes_per_row[r] >= 3 for r, s in enumerate(SLOTS) if s >= 0), res.flushes_per_row


@pytest.mark.parametrize("act_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_replay_dtypes(state_dtype, act_dtype):
    run_gdn_replay(GDNScenario(GEOM, 4, state_dtype, act_dtype, seed=1), cycles(4))


def test_bf16_ring():
    run_gdn_replay(GDNScenario(GEOM, 4, ring_dtype=torch.bfloat16, seed=2), cycles(4))


def test_uneven_head_dims_and_head_ratio():
    """K != V, not powers of two; 3 value heads per key head."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=3, head_k_dim=24, head_v_dim=40)
    run_gdn_replay(GDNScenario(geom, 4, seed=3), cycles(4))


def test_always_flush_and_force_flush():
    run_gdn_replay(GDNScenario(GEOM, 4, seed=4), 6, route="always_flush")
    run_gdn_replay(GDNScenario(GEOM, 8, seed=5), cycles(8), force_flush_at={2: [0], 5: [2, 3]})


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_always_flush_drain_in_row_tiles_past_head_v_dim(state_dtype):
    """The drain takes a tile's value rows a quarter at a time (``launch.drain_rows``):
    with V = 44 in tiles of 32 rows the second tile's quarters of 8 rows lie inside V
    (32-39), partly past it (40-47) and wholly past it (48-63)."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=3, head_k_dim=24, head_v_dim=44)
    run_gdn_replay(GDNScenario(geom, 4, state_dtype, torch.bfloat16, seed=12), 6, route="always_flush",
                   config=LaunchConfig(32, 4))


def test_fold_as_one_matmul():
    """``fold_dot``: the flush folds the ring with one tl.dot (needs V, K, L >= 16)."""
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16)
    run_gdn_replay(GDNScenario(geom, 16, seed=8), 2 * 16 + 3, fold_config=LaunchConfig(16, 2, fold_dot=1))


def test_fold_launch_over_several_heads():
    run_gdn_replay(GDNScenario(GEOM, 4, seed=6), cycles(4), fold_config=LaunchConfig(16, 2, heads_per_prog=3))


@pytest.mark.parametrize("row_block, heads, row_progs", [(2, 2, 0), (8, 2, 0), (16, 1, 0), (2, 2, 1), (2, 1, 3),
                                                          (4, 2, 2), (1, 1, 8)])
def test_fold_launch_row_blocks(row_block, heads, row_progs):
    """``row_block``: a fold program looks through a block of batch rows (one vector load of
    their cursors) and folds those that flush, force-flushed rows included, over several
    heads; the batch has 4 rows (one of them padding), so a block of 8 is partly past it.
    ``row_progs``: that many programs share the batch's flushing rows (as for Mamba2)."""
    cfg = LaunchConfig(16, 2, fold_dot=1, heads_per_prog=heads, loop_blocks=2, row_block=row_block,
                       row_progs=row_progs)
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=32)
    res = run_gdn_replay(GDNScenario(geom, 4, seed=18), cycles(4), force_flush_at={1: [2], 6: [0, 3]},
                         fold_config=cfg)
    assert min(f for f in res.flushes_per_row if f) >= 3


@pytest.mark.parametrize("geom, config, fold_config", [
    (GEOM, LaunchConfig(4, 1, loop_blocks=2), LaunchConfig(4, 1, loop_blocks=2)),
    (GEOM, LaunchConfig(4, 1, loop_blocks=4), LaunchConfig(4, 2, loop_blocks=8, heads_per_prog=3)),
    # V = 40 in runs of 2 x 8 rows: the last program's second block lies wholly past V.
    (GDNGeometry(1, 3, 24, 40), LaunchConfig(8, 1, loop_blocks=2), LaunchConfig(8, 1, loop_blocks=2)),
], ids=["runs_of_2", "whole_head", "uneven_last_run"])
def test_programs_looping_over_value_blocks(geom, config, fold_config):
    """``loop_blocks``: a program runs several blocks of value rows of a head one after
    another, the head's ring products computed once for all of them."""
    run_gdn_replay(GDNScenario(geom, 4, seed=10), cycles(4), config=config, fold_config=fold_config)
    run_gdn_replay(GDNScenario(geom, 4, seed=11), 6, route="always_flush", fold_config=fold_config)


BF16 = torch.bfloat16


@pytest.mark.parametrize("geom, config, dtypes", [
    (GEOM, LaunchConfig(4, 1, loop_blocks=4, prefetch=1), {}),
    (GDNGeometry(1, 3, 24, 40), LaunchConfig(8, 1, loop_blocks=2, prefetch=1), {}),  # the last run's second block past V
    # the table's bf16-state form since fd79a28: bf16 state, activations and d/k ring
    (GEOM, LaunchConfig(4, 1, loop_blocks=4, prefetch=1), dict(state_dtype=BF16, act_dtype=BF16, ring_dtype=BF16)),
    (GEOM, LaunchConfig(8, 1, prefetch=1), {}),  # one block a program: no next tile
], ids=["whole_head", "uneven_last_run", "bf16_state_on_bf16_ring", "one_block"])
@pytest.mark.parametrize("early", [False, True], ids=["ptxas_order", "early_tiles"])
def test_non_flush_loop_with_register_prefetch(geom, config, dtypes, early, monkeypatch):
    """``prefetch``: the non-flush launch loads a block's tiles one block ahead (masked
    past the program's last block and past V); ``early``: its first block's tiles and the
    ring's g / k tiles before the rest (``EARLY_TILES``, whatever the state dtype)."""
    monkeypatch.setattr(gdn_replay, "EARLY_TILES_STATES", (torch.float32, BF16) if early else ())
    res = run_gdn_replay(GDNScenario(geom, 4, seed=12, **dtypes), cycles(4), config=config, fold_config=config,
                         force_flush_at={1: [2]})
    assert min(f for f in res.flushes_per_row if f) >= 3


def test_launch_configs_register_cap_reaches_the_replay_launches(monkeypatch):
    """A config's ``maxnreg`` (the fold candidates under a cap of 128) is passed to the
    launch it configures and to no other, and the capped fold keeps the recurrence."""
    caps = {}
    launch = gdn_replay.launch_kernel

    def spy(kernel, grid, **kw):
        caps[kw["MODE"]] = kw.get("maxnreg")
        return launch(kernel, grid, **kw)

    monkeypatch.setattr(gdn_replay, "launch_kernel", spy)
    fold = LaunchConfig(16, 1, 1, 1, maxnreg=128)
    res = run_gdn_replay(GDNScenario(GEOM, 4, seed=14), cycles(4), fold_config=fold, config=LaunchConfig(8, 1))
    assert min(f for f in res.flushes_per_row if f) >= 3
    assert caps == {gdn_replay.FOLD.value: 128, gdn_replay.NONFLUSH.value: None}


def test_packed_and_separate_qkv_agree():
    outs = []
    for packed in (False, True):
        outs.append(run_gdn_replay(GDNScenario(GEOM, 4, packed=packed, seed=7), cycles(4)).max_err)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("name", ["d_cache", "k_cache", "g_cache"])
def test_corrupted_ring_entry_is_detected(name):
    def corrupt(t, cache):
        if t == 3:
            slot = SLOTS[0]
            w = int(cache.write_pos[slot])
            assert w >= 1
            getattr(cache, name)[0, slot, 0, w - 1] += 50.0 if name != "g_cache" else -5.0
    with pytest.raises(AssertionError, match="error"):
        run_gdn_replay(GDNScenario(GEOM, 8, seed=8), 12, corrupt=corrupt)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_standard(state_dtype):
    run_gdn_standard(GDNScenario(GEOM, 1, state_dtype, torch.bfloat16, seed=9), 8)


@pytest.fixture
def standard_launches(monkeypatch):
    """The keyword arguments of every launch of the standard kernel, in order (the launches
    still run)."""
    launches = []
    launch = gdn_standard.launch_kernel

    def spy(kernel, grid, **kw):
        launches.append(kw)
        return launch(kernel, grid, **kw)

    monkeypatch.setattr(gdn_standard, "launch_kernel", spy)
    return launches


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_standard_kernel_with_its_state_loads_first(state_dtype, standard_launches):
    """``early_state`` (the state tile's loads issued before the step's other loads, behind
    a barrier) reaches the standard kernel on its three routes and leaves each on the
    recurrence: the standard step, ``always_flush`` draining staggered rings, and
    ``standard_step`` on the rings it emptied."""
    early = LaunchConfig(8, 1, early_state=1)
    run_gdn_standard(GDNScenario(GEOM, 1, state_dtype, torch.bfloat16, seed=15), 6, config=early)
    run_gdn_replay(GDNScenario(GEOM, 4, state_dtype, torch.bfloat16, seed=16), 5, config=early,
                   route=lambda t: "always_flush" if t == 0 else "standard_step")
    flags = [kw["EARLY_STATE"] for kw in standard_launches]
    assert len(flags) == 6 + 5 and all(flags), flags
    run_gdn_standard(GDNScenario(GEOM, 1, state_dtype, torch.bfloat16, seed=15), 1, config=LaunchConfig(8, 1))
    assert standard_launches[-1]["EARLY_STATE"] is False


@pytest.mark.parametrize("geom, even", [
    (GEOM, True),                                              # K fills its tile, V = 2 tiles of 8 rows
    (GDNGeometry(num_k_heads=1, num_v_heads=3, head_k_dim=24, head_v_dim=40), False),  # K pads to 32
    (GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=20), False),  # V: 2.5 tiles
])
def test_standard_kernel_specialised_on_the_pools_shape(geom, even, standard_launches):
    """The standard kernel takes the pool's row stride as a constant (K; V for a V-innermost
    pool) and drops its tile masks only where the tile lies inside the head, and stays on
    the recurrence either way (an uneven tile's masked rows and columns are real memory of
    the next row or head: a dropped mask there would corrupt it)."""
    def seen():
        return [(kw["EVEN_TILE"], kw["STATE_ROW_STRIDE"], kw["V_INNER"]) for kw in standard_launches]

    run_gdn_standard(GDNScenario(geom, 1, seed=17), 3, config=LaunchConfig(8, 1))
    assert seen() == [(even, geom.head_k_dim, False)] * 3
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    pool_kv = torch.zeros(2, HV, K, V, device=DEVICE)  # TensorRT-LLM 1.2's order, taken as its transposed view
    q, k = torch.randn(1, H, K, device=DEVICE), torch.randn(1, H, K, device=DEVICE)
    rs.fused_sigmoid_gating_delta_rule_update(pool_kv.transpose(-1, -2), q, k, torch.randn(1, HV, V, device=DEVICE),
                                              torch.randn(1, HV, device=DEVICE), torch.randn(1, HV, device=DEVICE),
                                              -torch.ones(HV, device=DEVICE), torch.zeros(HV, device=DEVICE),
                                              config=LaunchConfig(8, 1))
    assert seen()[-1] == (even, V, True)


def test_flush_checkpoint_equals_standard_state():
    L, batch = 4, 3
    sc = GDNScenario(GEOM, L, seed=10)
    cache = GDNReplayCache(GEOM, 1, batch, L, device=DEVICE)
    cache.ssm_state.normal_()
    std_state = cache.ssm_state[0].clone()
    for t in range(2 * L):
        kw = sc.kernel_kwargs(sc.step_inputs(batch))
        y_rep = rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **kw, **cache.ring_kwargs(0))
        y_std = rs.fused_sigmoid_gating_delta_rule_update(std_state, **kw)
        cache.advance(batch=batch)
        torch.testing.assert_close(y_rep, y_std, rtol=1e-4, atol=1e-4)
        if (t + 1) % L == 0:
            torch.testing.assert_close(cache.ssm_state[0], std_state, rtol=1e-5, atol=1e-5)


def test_bad_input():
    sc = GDNScenario(GEOM, 4)
    cache = GDNReplayCache(GEOM, 1, 3, 4, device=DEVICE)
    kw = sc.kernel_kwargs(sc.step_inputs(3))
    with pytest.raises(ValueError, match="num_k_heads .* must divide num_v_heads"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "q": kw["q"][:, :1].expand(3, 3, 16),
                                                                          "k": kw["k"][:, :1].expand(3, 3, 16)})
    with pytest.raises(ValueError, match="v must have shape"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "v": kw["v"][:2]})
    with pytest.raises(ValueError, match="state must have shape"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0].transpose(-1, -2)[:, :, :8], **kw)
    with pytest.raises(TypeError, match="g_cache must have dtype"):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **kw,
                                                      **{**cache.ring_kwargs(0), "g_cache": cache.g_cache[0].half()})
    with pytest.raises(ValueError, match="k_cache must have shape"):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **kw,
                                                      **{**cache.ring_kwargs(0), "k_cache": cache.d_cache[0]})
    with pytest.raises(ValueError, match="route must be one of"):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **kw, route="state_and_output",
                                                      **cache.ring_kwargs(0))
    with pytest.raises(ValueError, match="num_k_heads .* must divide"):
        GDNGeometry(3, 4, 16, 16)


def test_bytes_per_slot():
    geom = GDNGeometry(16, 32, 128, 128)  # Qwen3.5-4B
    b = rs.gdn_bytes_per_slot(geom, 16)
    assert b["checkpoint"] == 2 * 2**20
    assert b["ring"] == (32 * 16 * 128 + 16 * 16 * 128) * 4 + 32 * 16 * 4


def test_bad_input_layouts():
    sc = GDNScenario(GEOM, 4)
    cache = GDNReplayCache(GEOM, 1, 3, 4, device=DEVICE)
    kw = sc.kernel_kwargs(sc.step_inputs(3))
    strided_q = kw["q"].transpose(1, 2).contiguous().transpose(1, 2)
    with pytest.raises(ValueError, match="q must have stride 1"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "q": strided_q})
    with pytest.raises(ValueError, match="a must have shape"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "a": kw["a"][:, :2]})
    with pytest.raises(TypeError, match="k must have the dtype of q"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "k": kw["k"].half()})
    with pytest.raises(ValueError, match="head_k_dim must be in"):
        big = torch.zeros(3, 2, 300, device=DEVICE)
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, "q": big, "k": big})
    with pytest.raises(ValueError, match="qkv must have shape"):
        rs.split_packed_qkv(torch.zeros(3, 10, device=DEVICE), 2, 4, 16, 16)
    with pytest.raises(ValueError, match="buffer length L"):
        rs.fused_recurrent_gated_delta_rule_replayssm(
            cache.ssm_state[0], **kw, **{**cache.ring_kwargs(0), "d_cache": torch.zeros(3, 4, 0, 16, device=DEVICE)})
    # Index and flag vectors with a stride: the kernels read them packed.
    strided_indices = torch.tensor([0, 0, 1, 0, 2, 0], dtype=torch.int32, device=DEVICE)[::2]
    before = cache.ssm_state.clone()
    strided_kw = {**kw, "initial_state_indices": strided_indices}
    with pytest.raises(ValueError, match="initial_state_indices must have unit stride"):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **strided_kw, **cache.ring_kwargs(0))
    with pytest.raises(ValueError, match="initial_state_indices must have unit stride"):
        rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **strided_kw)
    for name in ("A_log", "dt_bias"):  # per-head vectors, read as A_log_ptr + head
        with pytest.raises(ValueError, match=f"{name} must have unit stride"):
            rs.fused_sigmoid_gating_delta_rule_update(cache.ssm_state[0], **{**kw, name: kw[name].repeat(2)[::2]})
    strided_flags = torch.zeros(6, dtype=torch.int8, device=DEVICE)[::2]
    with pytest.raises(ValueError, match="force_flush must have unit stride"):
        rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], **kw, **cache.ring_kwargs(0),
                                                      force_flush=strided_flags)
    assert torch.equal(cache.ssm_state, before)


def test_standard_step_route_after_a_drain():
    """GDN ``standard_step`` on rings an ``always_flush`` step emptied equals the recurrence."""
    run_gdn_replay(GDNScenario(GEOM, 4, seed=9), 5, route=lambda t: "always_flush" if t == 0 else "standard_step")


def test_standard_step_route_refuses_a_non_empty_ring():
    sc = GDNScenario(GEOM, 4, seed=10)
    with pytest.raises(AssertionError, match="output error nan"):
        run_gdn_replay(sc, 1, route="standard_step")  # staggered cursors: some rings are not empty


def test_standard_step_leaves_a_refused_row_alone():
    """The row whose ring is not empty gets NaN outputs and keeps its state, ring and
    cursor bit for bit (the cursor check masks the standard kernel's stores); the row with
    an empty ring takes the standard step."""
    H, HV, K, V = GEOM.num_k_heads, GEOM.num_v_heads, GEOM.head_k_dim, GEOM.head_v_dim
    cache = GDNReplayCache(GEOM, 1, 2, 4, device=DEVICE)
    cache.ssm_state.normal_()
    cache.d_cache.normal_()
    cache.write_pos.copy_(torch.tensor([0, 2], dtype=torch.int32))
    before = {k: getattr(cache, k).clone() for k in ("ssm_state", "d_cache", "write_pos")}
    g = torch.Generator().manual_seed(12)
    q, k = torch.randn(2, H, K, generator=g).to(DEVICE), torch.randn(2, H, K, generator=g).to(DEVICE)
    v, a, b = (torch.randn(2, HV, V, generator=g).to(DEVICE), torch.randn(2, HV, generator=g).to(DEVICE),
               torch.randn(2, HV, generator=g).to(DEVICE))
    A_log, dt_bias = torch.randn(HV, generator=g).to(DEVICE), torch.randn(HV, generator=g).to(DEVICE)
    slots = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    out = rs.fused_recurrent_gated_delta_rule_replayssm(cache.ssm_state[0], q, k, v, a, b, A_log, dt_bias,
                                                       initial_state_indices=slots, route="standard_step",
                                                       **cache.ring_kwargs(0))
    expected = before["ssm_state"][0, :1].clone()
    y_std = rs.fused_sigmoid_gating_delta_rule_update(expected, q[:1], k[:1], v[:1], a[:1], b[:1], A_log, dt_bias)
    assert torch.equal(out[0], y_std[0]) and torch.equal(cache.ssm_state[0, 0], expected[0])
    assert out[1].isnan().all()
    assert torch.equal(cache.ssm_state[0, 1], before["ssm_state"][0, 1])
    assert torch.equal(cache.d_cache, before["d_cache"]) and torch.equal(cache.write_pos, before["write_pos"])


@pytest.mark.parametrize("route", ["output_only", "always_flush", "standard"])
def test_v_innermost_pool_matches_k_innermost(route):
    """TensorRT-LLM 1.2 keeps GDN states as ``[slots, HV, K, V]``: the transposed view of
    such a pool is taken as it is (V innermost) and steps exactly as the same states in a
    ``[slots, HV, V, K]`` pool, over 2 cycles with flushes (K != V, V not a power of two)."""
    geom, L, steps = GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=24), 4, 10
    g = torch.Generator().manual_seed(21)
    H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    slots = torch.tensor([3, 0, -1, 1], dtype=torch.int32, device=DEVICE)
    pool_kv = (torch.randn(5, HV, K, V, generator=g) * 0.3).to(DEVICE)  # TensorRT-LLM 1.2's order
    start = pool_kv.transpose(-1, -2).clone()
    runs = []
    for state in (pool_kv.transpose(-1, -2), pool_kv.transpose(-1, -2).contiguous()):
        cache = GDNReplayCache(geom, 1, 5, L, device=DEVICE, with_state=False)
        cache.write_pos.copy_(torch.tensor([0, 2, 3, 1, 0], dtype=torch.int32))
        gen, outs = torch.Generator().manual_seed(22), []
        for _ in range(steps):
            n = len(slots)
            q, k = torch.randn(n, H, K, generator=gen).to(DEVICE), torch.randn(n, H, K, generator=gen).to(DEVICE)
            v = torch.randn(n, HV, V, generator=gen).to(DEVICE)
            a, b = torch.randn(n, HV, generator=gen).to(DEVICE), torch.randn(n, HV, generator=gen).to(DEVICE)
            args = (q, k, v, a, b, -torch.ones(HV, device=DEVICE), torch.zeros(HV, device=DEVICE))
            if route == "standard":
                outs.append(rs.fused_sigmoid_gating_delta_rule_update(state, *args, initial_state_indices=slots))
            else:
                outs.append(rs.fused_recurrent_gated_delta_rule_replayssm(
                    state, *args, initial_state_indices=slots, route=route, **cache.ring_kwargs(0)))
                cache.advance(slots, route=route)
        runs.append((torch.stack(outs), state))
    (out_vi, state_vi), (out_ki, state_ki) = runs
    assert state_vi.data_ptr() == pool_kv.data_ptr() and state_vi.stride(-2) == 1  # updated in place, as given
    real = (slots != -1).cpu()  # a padding row's output is not written
    torch.testing.assert_close(out_vi[:, real], out_ki[:, real], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(state_vi, state_ki, rtol=1e-6, atol=1e-6)
    assert not torch.equal(state_vi[3], start[3])  # the states moved


def test_state_pool_layouts_refused():
    geom = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16)
    q = torch.randn(2, 1, 16, device=DEVICE)
    args = (q, q.clone(), torch.randn(2, 2, 16, device=DEVICE), torch.randn(2, 2, device=DEVICE),
            torch.randn(2, 2, device=DEVICE), torch.zeros(2, device=DEVICE), torch.zeros(2, device=DEVICE))
    strided = torch.zeros(4, geom.num_v_heads, 16, 32, device=DEVICE)[..., ::2]  # neither layout
    with pytest.raises(ValueError, match="transpose"):
        rs.fused_sigmoid_gating_delta_rule_update(strided, *args)


@pytest.mark.parametrize("state_dtype, stages", [(torch.float32, 2), (torch.bfloat16, None)])
def test_loop_stages_follow_the_state_dtype(state_dtype, stages):
    """The non-flush launch's loop over value blocks is staged for an fp32 state only (a
    bf16 state lost 1-11% with it, H200): what the launch is handed, recorded, not run."""
    from trtllm_replayssm.aot.specs import Recorder, _gdn_calls
    from trtllm_replayssm.models import model
    from trtllm_replayssm.ops.gdn import replay

    with Recorder() as rec:
        _gdn_calls(model("qwen3.5-4b").geom, state_dtype, torch.bfloat16, 128, 16, False, "output_only", "sm90")()
    modes = {launch.kwargs["MODE"]: launch.kwargs["LOOP_STAGES"] for launch in rec.launches}
    assert modes == {replay.NONFLUSH.value: stages, replay.FOLD.value: None}
