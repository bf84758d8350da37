"""TensorRT-LLM main's speculative path with ReplaySSM at real shapes inside a CUDA graph
(GPU only), on the stand-in V2 manager: every layer's verify call through the patched
entry plus ``update_mamba_states`` (conv promotion and cursor commit) are captured once
and replayed over several ring cycles with changing acceptance; outputs match the
standard spec path run eagerly on packed twins, and the accepted conv windows land."""

from types import SimpleNamespace

import torch

from conftest import requires_cuda
from trtllm_replayssm.integration import apply as apply_mod
from trtllm_replayssm.models import GDN_MODELS, MAMBA2_MODELS
from trtllm_replayssm.ops.gdn.spec_standard import gdn_spec_standard
from trtllm_replayssm.ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard

pytestmark = requires_cuda

T, BH, STEPS = 4, 16, 12
REAL = 30  # requests; two padding rows on the dummy slot follow them


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _requests(mgr):
    reqs = [SimpleNamespace(py_request_id=i) for i in range(REAL)]
    mgr.prepare_resources(SimpleNamespace(context_requests=reqs, generation_requests=[]))
    pads = [SimpleNamespace(py_request_id=-1 - i, is_dummy=True) for i in range(2)]
    batch = SimpleNamespace(context_requests=[], generation_requests=reqs + pads)
    mgr.prepare_resources(batch)  # the padding rows get the dummy slot
    idx = torch.tensor(mgr.get_state_indices([r.py_request_id for r in reqs + pads]), dtype=torch.int32, device="cuda")
    return batch, idx


def _filler(inputs, windows, n, saved):
    """Fills the static ``inputs`` and the first ``n`` rows of each layer's conv windows (as
    the conv update would), keeping a copy of the windows in ``saved``."""

    def fill(g):
        for t in inputs:
            t.copy_(torch.randn(t.shape, generator=g, device="cuda"))
        saved.clear()
        for w in windows:
            w[:n].copy_(torch.randn(w[:n].shape, generator=g, device="cuda"))
            saved.append(w[:n].clone())

    return fill


def _run(mgr, batch, idx, fill, step, check) -> int:
    """``fill`` the static inputs (and the conv windows), replay the captured step, check;
    returns how many rows were set to flush at their next verify."""
    g = torch.Generator(device="cuda").manual_seed(7)
    accepted = torch.ones(len(idx), dtype=torch.int32, device="cuda")
    md = SimpleNamespace(num_seqs=len(idx), num_contexts=0)

    def captured():
        step()
        mgr.update_mamba_states(md, accepted, state_indices=idx)

    mgr.prepare_resources(batch)
    fill(g)
    accepted[:REAL] = torch.randint(1, T + 1, (REAL,), generator=g, device="cuda")
    replay = mgr.get_aux_cache_extension("trtllm_replayssm").replay
    captured()  # eager first: compiles every kernel (a real verify + commit, checked like the rest)
    check(accepted)
    flushes = 0
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured()
    for _ in range(STEPS):
        mgr.prepare_resources(batch)
        fill(g)
        accepted[:REAL] = torch.randint(1, T + 1, (REAL,), generator=g, device="cuda")
        graph.replay()
        check(accepted)
        flushes += int(replay.is_flush[idx[:REAL].long()].sum())
    return flushes


def _conv_landed(mgr, idx, accepted, windows_before):
    for i, layer in enumerate(mgr.mamba_pp_layers):
        conv = mgr.get_conv_states(layer)
        got = conv[idx[:REAL].long()]
        want = windows_before[i][torch.arange(REAL, device="cuda"), accepted[:REAL].long() - 1]
        assert torch.equal(got, want), f"layer {i}: accepted conv windows"


def test_mamba2_mtp_verify_and_commit_in_cuda_graph(main_trtllm):
    main_trtllm()
    apply_mod.apply_replayssm(buffer_len=BH, route="output_only", speculative=True)
    from tensorrt_llm._torch.modules.mamba import mamba2_mixer as mixer
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    geom = MAMBA2_MODELS["nemotron-3-super"].geom
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    mgr = MambaHybridCacheManagerV2(N, 4, H, G, P, [True, True], torch.bfloat16, torch.float32, num_slots=REAL + 4,
                                    device="cuda", spec_config=SimpleNamespace(max_draft_len=T - 1),
                                    use_replay_state_update=True)
    batch, idx = _requests(mgr)
    n, layers = len(idx), mgr.mamba_pp_layers
    g0 = torch.Generator(device="cuda").manual_seed(3)
    states = [mgr.get_ssm_states(layer) for layer in layers]
    for st in states:
        st[idx[:REAL].long()] = torch.randn(REAL, H, P, N, generator=g0, device="cuda")
    twins = [st.clone() for st in states]
    inter = [torch.zeros(st.shape[0], T, H, P, N, device="cuda") for st in states]
    A = [-(torch.rand(H, generator=g0, device="cuda") + 0.5) for _ in layers]
    D, dt_bias = torch.randn(H, generator=g0, device="cuda"), torch.randn(H, generator=g0, device="cuda")
    x = torch.empty(len(layers), n, T, H, P, dtype=torch.bfloat16, device="cuda")
    dt = torch.empty(len(layers), n, T, H, dtype=torch.bfloat16, device="cuda")
    B, C = (torch.empty(len(layers), n, T, G, N, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    out = torch.empty(len(layers), n, T, H, P, dtype=torch.bfloat16, device="cuda")
    windows = [mgr.mamba_layer_cache(layer).intermediate_conv_window for layer in layers]
    saved = []
    fill = _filler((x, dt, B, C), windows, n, saved)

    def step():
        for i, layer in enumerate(layers):
            cache = mgr.mamba_layer_cache(layer)
            mixer.selective_state_update_native(
                cache.temporal, x[i], dt[i, ..., None].expand(n, T, H, P), A[i][:, None, None].expand(H, P, N), B[i],
                C[i], D[:, None].expand(H, P), z=None, dt_bias=dt_bias[:, None].expand(H, P), dt_softplus=True,
                state_batch_indices=idx, out=out[i], disable_state_update=True,
                intermediate_states_buffer=cache.intermediate_ssm, cache_steps=T,
                intermediate_state_indices=torch.arange(n, dtype=torch.int32, device="cuda"))

    def check(accepted):
        for i in range(len(layers)):
            ref = selective_state_update_spec_standard(twins[i], x[i], dt[i], A[i], B[i], C[i], D=D, dt_bias=dt_bias,
                                                       dt_softplus=True, state_batch_indices=idx,
                                                       intermediate_states=inter[i])
            assert _rel(out[i, :REAL], ref[:REAL]) < 5e-3, f"layer {i}"
            promote_spec_state(twins[i], inter[i], accepted[:REAL], idx[:REAL])
        _conv_landed(mgr, idx, accepted, saved)

    assert _run(mgr, batch, idx, fill, step, check) > 0  # rings went round


def test_gdn_mtp_verify_and_commit_in_cuda_graph(main_trtllm):
    main_trtllm()
    apply_mod.apply_replayssm(models=["gdn"], buffer_len=BH, route="output_only", speculative=True)
    from tensorrt_llm._torch.modules.mamba import gdn_mixer
    from tensorrt_llm._torch.pyexecutor.kv_cache.mamba_cache_manager import MambaHybridCacheManagerV2

    geom = GDN_MODELS["qwen3.5-4b"].geom
    Hk, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
    mgr = MambaHybridCacheManagerV2(K, 4, HV, Hk, V, [True, True], torch.bfloat16, torch.float32,
                                    num_slots=REAL + 4, device="cuda", conv_state_layout="q_k_v",
                                    spec_config=SimpleNamespace(max_draft_len=T - 1), use_replay_state_update=True)
    batch, idx = _requests(mgr)
    n, layers = len(idx), mgr.mamba_pp_layers
    g0 = torch.Generator(device="cuda").manual_seed(4)
    states = [mgr.get_ssm_states(layer) for layer in layers]
    for st in states:
        st[idx[:REAL].long()] = torch.randn(REAL, HV, V, K, generator=g0, device="cuda") * 0.05
    twins = [st.clone() for st in states]
    inter = [torch.zeros(st.shape[0], T, HV, V, K, device="cuda") for st in states]
    modules = [gdn_mixer.Qwen3NextGatedDeltaNet(torch.randn(HV, generator=g0, device="cuda") * 0.5,
                                                torch.randn(HV, generator=g0, device="cuda"), Hk, HV, K, V)
               for _ in layers]
    qkv = torch.empty(len(layers), n * T, 2 * Hk * K + HV * V, dtype=torch.bfloat16, device="cuda")
    a, b = (torch.empty(len(layers), n * T, HV, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    outs = [None] * len(layers)
    windows = [mgr.mamba_layer_cache(layer).intermediate_conv_window for layer in layers]
    saved = []
    fill = _filler((qkv, a, b), windows, n, saved)
    spec_md = SimpleNamespace(max_draft_len=T - 1)

    def step():
        for i, layer in enumerate(layers):
            cache = mgr.mamba_layer_cache(layer)
            outs[i] = modules[i].forward_decode(
                cache.conv, cache.temporal, query_start_loc_long=None, spec_metadata=spec_md,
                intermediate_conv_states=cache.intermediate_conv_window, intermediate_ssm_states=cache.intermediate_ssm,
                is_target_verify=True, mixed_qkv=qkv[i], a=a[i], b=b[i], cache_indices=idx, num_decodes=n)

    def check(accepted):
        for i in range(len(layers)):
            q, k, v = torch.split(qkv[i], [Hk * K, Hk * K, HV * V], dim=-1)
            ref = gdn_spec_standard(twins[i], q.reshape(n, T, Hk, K), k.reshape(n, T, Hk, K), v.reshape(n, T, HV, V),
                                    a[i].reshape(n, T, HV), b[i].reshape(n, T, HV), modules[i].A_log,
                                    modules[i].dt_bias, initial_state_indices=idx, intermediate_states=inter[i])
            assert _rel(outs[i][:REAL], ref[:REAL]) < 5e-3, f"layer {i}"
            rows = idx[:REAL].long()
            twins[i][rows] = inter[i][rows, accepted[:REAL].long() - 1]
        _conv_landed(mgr, idx, accepted, saved)

    assert _run(mgr, batch, idx, fill, step, check) > 0
