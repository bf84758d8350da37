"""The main-era adapter (TensorRT-LLM >= 1.3) against a stand-in of its hybrid cache
manager on KV cache manager V2: rings as pool buffers of each slot's page, decode through
both of the Mamba2 mixer's state-update functions and GDN's packed entry, slot events
(new requests, a live request moved to another slot with its pages, block-reuse frees,
GDN mixed batches), the memory plan, and what is refused."""

from types import SimpleNamespace

import pytest
import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, Mamba2Geometry
from trtllm_replayssm.integration import apply as apply_mod
from trtllm_replayssm.integration.era_main import CURSOR_BLOCK, page_bytes, ring_bytes_per_slot, ring_geometry
from trtllm_replayssm.integration.eras import UnsupportedTensorRTLLM, detect_era
from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update as gdn_standard
from trtllm_replayssm.ops.mamba2 import selective_state_update as mamba2_standard

H, P, N, G, L = 4, 8, 16, 2, 4
MASK = [True, False, True]  # two Mamba layers around an attention layer


def _manager(slots=6, **kw):
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    return MambaHybridCacheManagerV2(N, 4, H, G, P, MASK, torch.float32, torch.float32, num_slots=slots,
                                     device=DEVICE, **kw)


def _req(i):
    return SimpleNamespace(py_request_id=i)


def _batch(ctx=(), gen=()):
    return SimpleNamespace(context_requests=[_req(i) for i in ctx], generation_requests=[_req(i) for i in gen])


def _gdn_manager_with_two_requests(g, Hk, HV, K, V, **kw):
    """A V2 manager of two GDN layers (main passes their geometry as mamba_num_heads=HV,
    head_dim=V, d_state=K, n_groups=H) with requests 7 and 9 prefilled: ``(manager, the
    extension, their slots, the layers' state views, packed twins of them)``."""
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    mgr = MambaHybridCacheManagerV2(K, 4, HV, Hk, V, MASK, torch.float32, torch.float32, num_slots=5, device=DEVICE,
                                    conv_state_layout="q_k_v", **kw)
    mgr.prepare_resources(_batch(ctx=[7, 9]))
    slots = mgr.get_state_indices([7, 9])
    states = [mgr.get_ssm_states(layer) for layer in mgr.mamba_pp_layers]
    for st in states:
        st[slots] = (torch.randn(2, HV, V, K, generator=g) * 0.3).to(DEVICE)
    return mgr, mgr.get_aux_cache_extension("trtllm_replayssm"), slots, states, [st.clone() for st in states]


class Mamba2Twin:
    """Each request's exact state, stepped by the standard kernel on a packed pool."""

    def __init__(self, g):
        self.g, self.states = g, {}
        self.A = -(torch.rand(H, generator=g) + 0.5).to(DEVICE)
        self.D = torch.randn(H, generator=g).to(DEVICE)
        self.dt_bias = torch.randn(H, generator=g).to(DEVICE)

    def prefill(self, mgr, rid):
        """The prefill's final state, written into the request's slot of every layer."""
        slot = mgr.get_state_indices([rid])[0]
        self.states[rid] = torch.randn(2, H, P, N, generator=self.g).to(DEVICE)
        for i, layer in enumerate(mgr.mamba_pp_layers):
            mgr.get_ssm_states(layer)[slot] = self.states[rid][i]

    def step(self, mgr, mixer, rids):
        """One decode step through the patched functions (layer 0: the Triton one, layer 1:
        FlashInfer's), with main's expanded A / D / dt_bias / dt; checked against the twin."""
        n = len(rids)
        idx = torch.tensor(mgr.get_state_indices(rids), dtype=torch.int32, device=DEVICE)
        for i, (layer, fn) in enumerate(zip(mgr.mamba_pp_layers, (mixer.selective_state_update_native,
                                                                 mixer.selective_state_update_fi))):
            x = torch.randn(n, H, P, generator=self.g).to(DEVICE)
            dt = torch.randn(n, H, generator=self.g).to(DEVICE)[..., None].expand(n, H, P)
            B, C = (torch.randn(n, G, N, generator=self.g).to(DEVICE) for _ in range(2))
            tied = dict(A=self.A[:, None, None].expand(H, P, N), D=self.D[:, None].expand(H, P),
                        dt_bias=self.dt_bias[:, None].expand(H, P), dt_softplus=True)
            y = fn(mgr.get_ssm_states(layer), x, dt, tied["A"], B, C, tied["D"], z=None, dt_bias=tied["dt_bias"],
                   dt_softplus=True, state_batch_indices=idx, out=torch.empty(n, H, P, device=DEVICE))
            for row, rid in enumerate(rids):
                twin = self.states[rid][i:i + 1]
                y_ref = mamba2_standard(twin, x[row:row + 1], dt[row:row + 1], tied["A"], B[row:row + 1],
                                        C[row:row + 1], D=tied["D"], dt_bias=tied["dt_bias"], dt_softplus=True)
                err = ((y[row] - y_ref[0]).norm() / y_ref.norm()).item()
                assert err < 1e-4, f"request {rid}, layer {i}: {err}"


def test_main_era_detected_patched_and_legacy_managers_refused(main_trtllm):
    main_trtllm()
    assert detect_era(("mamba2",)).name == "trtllm-main"
    info = apply_mod.apply_replayssm(buffer_len=L, route="output_only")
    assert info["era"] == "trtllm-main"
    names = "\n".join(info["patched"])
    for expected in ("mamba2_mixer.selective_state_update_native", "mamba2_mixer.selective_state_update_fi",
                     "MambaHybridCacheManagerV2", "PythonMambaCacheManager (refuses)"):
        assert expected in names
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import CppMambaHybridCacheManager

    with pytest.raises(UnsupportedTensorRTLLM, match="use_kv_cache_manager_v2"):
        CppMambaHybridCacheManager()


def test_main_without_the_extension_api_is_refused_untouched(main_trtllm):
    main_trtllm(with_extension_api=False)
    import tensorrt_llm._torch.modules.mamba.mamba2_mixer as mixer

    original = mixer.selective_state_update_native
    with pytest.raises(UnsupportedTensorRTLLM, match="MambaAuxCacheExtension"):
        apply_mod.apply_replayssm(buffer_len=L)
    assert mixer.selective_state_update_native is original and not apply_mod.applied()


@pytest.mark.parametrize("buffer_len", [L, 3])
def test_main_mamba2_decode_through_slot_moves_and_frees(main_trtllm, buffer_len):
    """Decode matches the standard kernel step for step while: requests start at staggered
    times; a live request is offloaded, its slot reused by a new request, and it comes back
    at another slot with its pages (its cursor restored from the pool); a request is freed
    with block reuse on (its page, as committed, holds the exact state). The conv states
    in the same pages stay untouched. At L = 3 the dt ring's block (12 fp32) and the
    cursors' (4 int32) are not multiples of 64 bytes: their padded pages keep every ring's
    slot stride and base at multiples of 16 elements."""
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=buffer_len, route="output_only")
    from tensorrt_llm._torch.modules.mamba import mamba2_mixer as mixer

    L = buffer_len
    mgr = _manager(enable_block_reuse=True)
    ext = mgr.get_aux_cache_extension("trtllm_replayssm")
    assert ext.replay.rings.x_cache[0].stride(0) > H * L * P  # the ring lives in the page, between slots
    for name in ("x_cache", "dt_cache", "B_cache"):
        for view in getattr(ext.replay.rings, name):
            assert view.stride(0) % 16 == 0 and view.storage_offset() % 16 == 0, (name, view.stride())
    assert tuple(ext.replay.rings.dt_cache[0].shape) == (6, H, L)
    assert all(int(v.count_nonzero()) == 0 for name in ("x_cache", "dt_cache", "B_cache")
               for v in getattr(ext.replay.rings, name))  # the stand-in's pages start as 0xAB bytes
    for conv in mgr.all_conv_states:
        conv.copy_(torch.randn(conv.shape, generator=torch.Generator().manual_seed(5)))
    conv_before = [c.clone() for c in mgr.all_conv_states]
    twin = Mamba2Twin(torch.Generator().manual_seed(0))

    def step(ctx=(), gen=()):
        mgr.prepare_resources(_batch(ctx, gen))
        for rid in ctx:
            twin.prefill(mgr, rid)
        if gen:
            twin.step(mgr, mixer, list(gen))

    step(ctx=[7])
    for _ in range(2):
        step(gen=[7])
    step(ctx=[9], gen=[7])  # 9 starts two steps behind
    for _ in range(L - 1):
        step(gen=[7, 9])
    assert ext.replay.write_pos[mgr.get_state_indices([9])[0]].item() != 0  # 9's ring holds entries
    old_slot = mgr.get_state_indices([9])[0]
    mgr.suspend(9)
    step(ctx=[11], gen=[7])
    assert mgr.get_state_indices([11])[0] == old_slot  # 11 took 9's slot and wrote its ring and cursor
    step(gen=[7, 11])
    new_slot = mgr.resume(9)
    assert new_slot != old_slot
    for before in conv_before:  # the conv state moved with 9's pages
        before[new_slot] = before[old_slot]
    for _ in range(2 * L + 1):
        step(gen=[7, 9, 11])
    slot7 = mgr.get_state_indices([7])[0]
    assert ext.replay.write_pos[slot7].item() != 0
    mgr.free_resources(_req(7))
    for i, layer in enumerate(mgr.mamba_pp_layers):
        exact = twin.states[7][i]
        torch.testing.assert_close(mgr.get_ssm_states(layer)[slot7], exact, rtol=1e-4, atol=1e-5)
    for conv, before in zip(mgr.all_conv_states, conv_before):
        assert torch.equal(conv, before)


def test_main_memory_plan_counts_the_rings(main_trtllm):
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=L, route="output_only")
    mgr = _manager()
    base = 2 * (H * P * N * 4 + (H * P + 2 * G * N) * 3 * 4)
    ring = ring_bytes_per_slot(Mamba2Geometry(H, P, N, G), L, torch.float32)
    assert ring == H * L * P * 4 + H * L * 4 + G * L * N * 4
    assert mgr._mamba_state_bytes_per_slot() == base + 2 * (ring + page_bytes((CURSOR_BLOCK,), torch.int32))
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager.common import (
        estimate_mamba_aux_cache_bytes_per_rank,
    )

    cfg = SimpleNamespace(mamba_num_heads=64, mamba_head_dim=64, ssm_state_size=128, n_groups=8,
                          hybrid_override_pattern="M-M*M-", torch_dtype=torch.bfloat16)
    mapping = SimpleNamespace(tp_size=2, pp_size=1, enable_attention_dp=False)
    got = estimate_mamba_aux_cache_bytes_per_rank(SimpleNamespace(pretrained_config=cfg), None, mapping,
                                                  spec_config=None, use_separate_draft_kv_cache=False)
    local = Mamba2Geometry(32, 64, 128, 4)
    assert got == 3 * (ring_bytes_per_slot(local, L, torch.bfloat16) + page_bytes((CURSOR_BLOCK,), torch.int32))
    qwen = SimpleNamespace(linear_num_value_heads=32, linear_num_key_heads=16, linear_key_head_dim=128,
                           linear_value_head_dim=128, num_hidden_layers=8, full_attention_interval=4)
    assert estimate_mamba_aux_cache_bytes_per_rank(SimpleNamespace(pretrained_config=qwen), None, mapping) == 0


@pytest.mark.parametrize("kw,words", [
    (dict(spec_config=SimpleNamespace(max_draft_len=2)), "TRTLLM_REPLAYSSM_SPEC=1"),
    (dict(mamba_ssm_stochastic_rounding=True), "stochastically"),
    (dict(conv_state_layout="q_k_v"), "switched on for mamba2 layers"),
])
def test_main_manager_refuses(main_trtllm, kw, words):
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=L)
    with pytest.raises(UnsupportedTensorRTLLM, match=words):
        _manager(**kw)


def test_main_gdn_packed_decode_and_mixed_batch_fold(main_trtllm):
    """GDN on main: decode through the packed varlen entry matches the engine's kernel; a
    step that mixes prefill and decode folds the decode rows first (main's GDN sends them
    through the chunked kernel), leaving exact states."""
    main_trtllm()
    info = apply_mod.apply_replayssm(models=["gdn"], buffer_len=L, route="output_only")
    assert any(p.endswith("gdn_mixer.fused_sigmoid_gating_delta_rule_update") for p in info["patched"])
    from tensorrt_llm._torch.modules.mamba import gdn_mixer

    Hk, HV, K, V = 2, 4, 16, 24
    g = torch.Generator().manual_seed(3)
    mgr, ext, slots, states, twins = _gdn_manager_with_two_requests(g, Hk, HV, K, V)
    assert ext.replay.geom == GDNGeometry(Hk, HV, K, V) and ext.replay.gdn_pool_order == "HV,V,K"
    idx = torch.tensor(slots, dtype=torch.int32, device=DEVICE)
    cu = torch.arange(3, dtype=torch.int32, device=DEVICE)
    A_log, dt_bias = torch.zeros(HV, device=DEVICE), torch.zeros(HV, device=DEVICE)
    for step in range(L + 2):
        mgr.prepare_resources(_batch(gen=[7, 9]))
        for i in range(2):
            kw = dict(A_log=A_log, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
                      q=torch.randn(1, 2, Hk, K, generator=g).to(DEVICE), k=torch.randn(1, 2, Hk, K, generator=g).to(DEVICE),
                      v=torch.randn(1, 2, HV, V, generator=g).to(DEVICE), a=torch.randn(2, HV, generator=g).to(DEVICE),
                      b=torch.randn(2, HV, generator=g).to(DEVICE), initial_state_indices=idx, cu_seqlens=cu,
                      use_qk_l2norm_in_kernel=True)
            o = gdn_mixer.fused_sigmoid_gating_delta_rule_update(initial_state_source=states[i], **kw)
            o_std = gdn_standard(twins[i], kw["q"][0], kw["k"][0], kw["v"][0], kw["a"], kw["b"], A_log, dt_bias, None,
                                 True, idx)
            assert ((o[0] - o_std).norm() / o_std.norm()).item() < 1e-4, f"step {step} layer {i}"
    assert ext.replay.write_pos[slots].tolist() != [0, 0]
    mgr.prepare_resources(_batch(ctx=[11], gen=[7, 9]))
    assert ext.replay.write_pos[slots].tolist() == [0, 0]
    for s, t in zip(states, twins):
        torch.testing.assert_close(s[slots], t[slots], rtol=1e-4, atol=1e-5)


def test_main_gdn_rings_take_the_state_pools_ring_dtype(main_trtllm):
    """The manager's pages hold bf16 d and k rings beside a bf16 GDN state pool (the drift
    study's choice, ``cache.gdn_ring_dtype``) and fp32 ones beside an fp32 pool; decode
    through the packed entry runs on them and stays near the engine's kernel."""
    main_trtllm()
    apply_mod.apply_replayssm(models=["gdn"], buffer_len=4, route="output_only")
    from tensorrt_llm._torch.modules.mamba import gdn_mixer
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    Hk, HV, K, V = 1, 2, 16, 16
    for state_dtype in (torch.float32, torch.bfloat16):
        mgr = MambaHybridCacheManagerV2(K, 4, HV, Hk, V, MASK, torch.bfloat16, state_dtype, num_slots=3, device=DEVICE,
                                        conv_state_layout="q_k_v")
        rings = mgr.get_aux_cache_extension("trtllm_replayssm").replay.rings
        assert {r.dtype for r in rings.d_cache + rings.k_cache} == {state_dtype}
        assert {r.dtype for r in rings.g_cache} == {torch.float32}
        mgr.prepare_resources(_batch(ctx=[7]))
        idx = torch.tensor(mgr.get_state_indices([7]), dtype=torch.int32, device=DEVICE)
        g = torch.Generator().manual_seed(5)
        states = [mgr.get_ssm_states(layer) for layer in mgr.mamba_pp_layers]
        for st in states:
            st[idx] = (torch.randn(1, HV, V, K, generator=g) * 0.3).to(state_dtype).to(DEVICE)
        twins = [st.clone() for st in states]
        A_log, dt_bias = torch.zeros(HV, device=DEVICE), torch.zeros(HV, device=DEVICE)
        tol = 1e-4 if state_dtype == torch.float32 else 3e-2
        for step in range(6):  # (past a flush at L = 4)
            mgr.prepare_resources(_batch(gen=[7]))
            for layer, (st, twin) in enumerate(zip(states, twins)):
                kw = dict(q=torch.randn(1, 1, Hk, K, generator=g), k=torch.randn(1, 1, Hk, K, generator=g),
                          v=torch.randn(1, 1, HV, V, generator=g), a=torch.randn(1, HV, generator=g),
                          b=torch.randn(1, HV, generator=g))
                kw = {n: t.to(torch.bfloat16).to(DEVICE) for n, t in kw.items()}
                o = gdn_mixer.fused_sigmoid_gating_delta_rule_update(
                    A_log=A_log, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0, initial_state_source=st,
                    initial_state_indices=idx, cu_seqlens=torch.arange(2, dtype=torch.int32, device=DEVICE),
                    use_qk_l2norm_in_kernel=True, **kw)
                o_std = gdn_standard(twin, kw["q"][0], kw["k"][0], kw["v"][0], kw["a"], kw["b"], A_log, dt_bias,
                                     None, True, idx)
                err = ((o[0].float() - o_std.float()).norm() / o_std.float().norm()).item()
                assert err < tol, (state_dtype, step, layer, err)


def test_main_mamba2_speculative_verify_commit_and_conv_promotion(main_trtllm):
    """MTP on main with ReplaySSM's verify: the mixer's verify call (cache_steps = T, no
    intermediate states kept) matches the standard spec path, ``update_mamba_states``
    commits the cursors by the accepted counts and promotes the accepted conv window; a
    padding row on the dummy slot moves nothing; a request moved to another slot with its
    pages keeps all three of its cursors."""
    from trtllm_replayssm.ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard

    main_trtllm()
    info = apply_mod.apply_replayssm(buffer_len=4, route="output_only", speculative=True)
    assert info["era"] == "trtllm-main"
    from tensorrt_llm._torch.modules.mamba import mamba2_mixer as mixer

    T = 3
    mgr = _manager(spec_config=SimpleNamespace(max_draft_len=T - 1, max_total_draft_tokens=T - 1),
                   use_replay_state_update=True)  # TensorRT-LLM turns its replay on with MTP; ReplaySSM's replaces it
    ext = mgr.get_aux_cache_extension("trtllm_replayssm")
    assert ext.replay.spec == (T, 4) and mgr.mamba_layer_cache(0).intermediate_ssm is None
    g = torch.Generator().manual_seed(4)
    twin = Mamba2Twin(g)
    mgr.prepare_resources(_batch(ctx=[7, 9]))
    for rid in (7, 9):
        twin.prefill(mgr, rid)
    inter = {rid: torch.zeros(2, 1, T, H, P, N, device=DEVICE) for rid in (7, 9)}
    pad = SimpleNamespace(py_request_id=-99, is_dummy=True)
    flushes, rids = 0, [7, 9]
    for step in range(8):
        if step == 4:  # 9 goes to the host and comes back at another slot
            old = mgr.get_state_indices([9])[0]
            mgr.suspend(9)
            assert mgr.resume(9, avoid=(old,)) != old
        mgr.prepare_resources(SimpleNamespace(context_requests=[], generation_requests=[_req(7), _req(9), pad]))
        idx = torch.tensor(mgr.get_state_indices(rids + [-99]), dtype=torch.int32, device=DEVICE)
        flushes += int(ext.replay.is_flush[idx[0]])
        n = len(idx)
        for i, layer in enumerate(mgr.mamba_pp_layers):
            cache = mgr.mamba_layer_cache(layer)
            cache.intermediate_conv_window[:n].copy_(torch.randn(cache.intermediate_conv_window[:n].shape, generator=g))
            x = torch.randn(n, T, H, P, generator=g).to(DEVICE)
            dt = torch.randn(n, T, H, generator=g).to(DEVICE)[..., None].expand(n, T, H, P)
            B, C = (torch.randn(n, T, G, N, generator=g).to(DEVICE) for _ in range(2))
            A = twin.A[:, None, None].expand(H, P, N)
            D, dt_bias = twin.D[:, None].expand(H, P), twin.dt_bias[:, None].expand(H, P)
            out = torch.empty(n, T, H, P, device=DEVICE)
            mixer.selective_state_update_native(
                cache.temporal, x, dt, A, B, C, D, z=None, dt_bias=dt_bias, dt_softplus=True,
                state_batch_indices=idx, out=out, disable_state_update=True,
                intermediate_states_buffer=cache.intermediate_ssm, cache_steps=T,
                intermediate_state_indices=torch.arange(n, dtype=torch.int32, device=DEVICE))
            for row, rid in enumerate(rids):
                ref = selective_state_update_spec_standard(
                    twin.states[rid][i:i + 1], x[row:row + 1], dt[row:row + 1, :, :, 0], twin.A, B[row:row + 1],
                    C[row:row + 1], D=twin.D, dt_bias=twin.dt_bias, dt_softplus=True, intermediate_states=inter[rid][i])
                assert ((out[row] - ref[0]).norm() / ref.norm()).item() < 1e-4, f"step {step} request {rid} layer {i}"
        accepted = [1 + step % T, 1 + (step + 1) % T]
        conv_before = [c.clone() for c in mgr.all_conv_states]
        mgr.update_mamba_states(SimpleNamespace(num_seqs=n, num_contexts=0),
                                torch.tensor(accepted + [1], dtype=torch.int32, device=DEVICE), state_indices=idx)
        for row, (rid, acc) in enumerate(zip(rids, accepted)):
            for i in range(2):
                promote_spec_state(twin.states[rid][i:i + 1], inter[rid][i],
                                   torch.tensor([acc], dtype=torch.int32, device=DEVICE))
                window = mgr.mamba_layer_cache(mgr.mamba_pp_layers[i]).intermediate_conv_window[row, acc - 1]
                assert torch.equal(mgr.all_conv_states[i][idx[row]], window)
        for i in range(2):  # the dummy slot's conv state stays
            assert torch.equal(mgr.all_conv_states[i][0], conv_before[i][0])
    assert flushes >= 1


def test_main_gdn_speculative_verify_through_the_layer(main_trtllm):
    """GDN MTP on main: the layer gathers the states into a copy before its verify kernel
    call; the wrapped layer names the pool, slots and raw gates, so the kernel entry runs
    ReplaySSM's verify on the pool. Both of the layer's verify branches (pure decode and
    mixed with prefill) match the standard spec path over several commits, a flush
    included; without the scope the entry goes to the engine's kernel."""
    from trtllm_replayssm.ops.gdn.spec_standard import gdn_spec_standard

    main_trtllm()
    info = apply_mod.apply_replayssm(models=["gdn"], buffer_len=4, route="output_only", speculative=True)
    assert any("forward_decode / forward_extend" in p for p in info["patched"])
    from tensorrt_llm._torch.modules.mamba import gdn_mixer

    Hk, HV, K, V, T = 1, 2, 16, 16, 3
    g = torch.Generator().manual_seed(6)
    mgr, ext, slots, states, twins = _gdn_manager_with_two_requests(
        g, Hk, HV, K, V, spec_config=SimpleNamespace(max_draft_len=T - 1), use_replay_state_update=True)
    assert ext.replay.spec == (T, 4)
    inter = torch.zeros(5, T, HV, V, K, device=DEVICE)
    idx = torch.tensor(slots, dtype=torch.int32, device=DEVICE)
    layers = [gdn_mixer.Qwen3NextGatedDeltaNet((torch.randn(HV, generator=g) * 0.5).to(DEVICE),
                                               torch.randn(HV, generator=g).to(DEVICE), Hk, HV, K, V) for _ in range(2)]
    spec_md = SimpleNamespace(max_draft_len=T - 1)
    flushes = 0
    for step in range(6):
        mgr.prepare_resources(_batch(gen=[7, 9]))
        flushes += int(ext.replay.is_flush[slots[0]])
        prefill = 5 if step % 2 else 0  # odd steps: a prefill ahead of the verify rows (its part is not modelled)
        for i, layer in enumerate(mgr.mamba_pp_layers):
            qkv = torch.randn(prefill + 2 * T, 2 * Hk * K + HV * V, generator=g).to(DEVICE)
            a, b = (torch.randn(prefill + 2 * T, HV, generator=g).to(DEVICE) for _ in range(2))
            cache = mgr.mamba_layer_cache(layer)
            kw = dict(spec_metadata=spec_md, intermediate_conv_states=cache.intermediate_conv_window,
                      intermediate_ssm_states=cache.intermediate_ssm, is_target_verify=True, mixed_qkv=qkv, a=a, b=b,
                      num_decodes=2)
            if prefill:
                out = layers[i].forward_extend(cache.conv, cache.temporal, num_prefill_tokens=prefill,
                                               state_indices_d=idx, num_decode_tokens=2 * T, **kw)[0, prefill:]
            else:
                out = layers[i].forward_decode(cache.conv, cache.temporal, query_start_loc_long=None, cache_indices=idx,
                                               **kw)
            q, k, v = torch.split(qkv[prefill:], [Hk * K, Hk * K, HV * V], dim=-1)
            ref = gdn_spec_standard(twins[i], q.reshape(2, T, Hk, K), k.reshape(2, T, Hk, K), v.reshape(2, T, HV, V),
                                    a[prefill:].reshape(2, T, HV), b[prefill:].reshape(2, T, HV), layers[i].A_log,
                                    layers[i].dt_bias, initial_state_indices=idx, intermediate_states=inter)
            got = out.reshape(2, T, HV, V)
            assert ((got - ref).norm() / ref.norm()).item() < 1e-4, f"step {step} layer {i}"
            accepted = torch.tensor([1 + step % T, T], dtype=torch.int32, device=DEVICE)
            for row in range(2):  # the twin keeps the state after the accepted tokens
                twins[i][slots[row]] = inter[slots[row], accepted[row] - 1]
        mgr.update_mamba_states(SimpleNamespace(num_seqs=2, num_contexts=0), accepted, state_indices=idx)
    assert flushes >= 1
    with pytest.raises(NotImplementedError):  # outside a layer's verify: the engine's own kernel
        gdn_mixer.fused_recurrent_gated_delta_rule_update(q=None, k=None, v=None, g=None, beta=None,
                                                          initial_state_source=None, initial_state_indices=None)


def test_main_speculative_refusals(main_trtllm):
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=4, speculative=True)
    with pytest.raises(UnsupportedTensorRTLLM, match="one draft length"):
        _manager(spec_config=SimpleNamespace(max_draft_len=2, max_total_draft_tokens=6))
    for drafts in (5, 4):  # 4: one token more than the history budget of 4
        with pytest.raises(UnsupportedTensorRTLLM, match="BUFFER_LEN >= drafts"):
            _manager(spec_config=SimpleNamespace(max_draft_len=drafts, max_total_draft_tokens=drafts))
    _manager(spec_config=SimpleNamespace(max_draft_len=3))  # 3 drafts and the bonus token: T = 4, the budget


def test_ring_geometry_reads_the_gdn_pools_order():
    """The manager's GDN state shape is (HV, V, K) on main and (HV, K, V) in the 1.2 era:
    the rings' geometry takes K and V from where the order puts them."""
    context = SimpleNamespace(ssm_state_shape=(8, 64, 128), n_groups_per_rank=2)
    assert ring_geometry(context, "gdn", "HV,V,K") == GDNGeometry(2, 8, head_k_dim=128, head_v_dim=64)
    assert ring_geometry(context, "gdn", "HV,K,V") == GDNGeometry(2, 8, head_k_dim=64, head_v_dim=128)
    assert ring_geometry(context, "mamba2", None) == Mamba2Geometry(nheads=8, headdim=64, dstate=128, ngroups=2)


def test_spec_path_refuses_an_autoregressive_call_on_verify_rings(main_trtllm):
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=4, speculative=True)
    from tensorrt_llm._torch.modules.mamba import mamba2_mixer as mixer
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    mgr = MambaHybridCacheManagerV2(16, 4, 4, 1, 16, [True], torch.float32, torch.float32, num_slots=4, device=DEVICE,
                                    spec_config=SimpleNamespace(max_draft_len=2))
    x = torch.randn(2, 4, 16, device=DEVICE)
    with pytest.raises(RuntimeError, match="cannot serve"):
        mixer.selective_state_update_native(mgr.get_ssm_states(0), x, torch.randn(2, 4, device=DEVICE),
                                            -torch.ones(4, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE),
                                            torch.randn(2, 1, 16, device=DEVICE),
                                            state_batch_indices=torch.tensor([1, 2], dtype=torch.int32, device=DEVICE))
