"""Switching ReplaySSM on in a (stand-in) TensorRT-LLM: the environment switch, era
detection and its refusals, the all-or-nothing patch, the cache-manager extension and the
autoload that patches each process where TensorRT-LLM gets imported."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry
from trtllm_replayssm.integration import apply as apply_mod
from trtllm_replayssm.integration.eras import UnsupportedTensorRTLLM, detect_era
from trtllm_replayssm.integration.switch import ReplayOptions, options_from_env
from trtllm_replayssm.ops.mamba2 import selective_state_update as standard


def test_env_switch():
    assert options_from_env({}) is None and options_from_env({"TRTLLM_REPLAYSSM": "0"}) is None
    o = options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_BUFFER_LEN": "8",
                          "TRTLLM_REPLAYSSM_ROUTE": "output_only", "TRTLLM_REPLAYSSM_MODELS": "mamba2"})
    assert o == ReplayOptions(8, "output_only", ("mamba2",), False)
    with pytest.raises(ValueError, match="TRTLLM_REPLAYSSM_BUFFER_LEN"):
        options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_BUFFER_LEN": "sixteen"})
    with pytest.raises(ValueError, match="route"):
        options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_ROUTE": "fastest"})
    with pytest.raises(ValueError, match="models"):
        options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_MODELS": "rwkv"})
    with pytest.raises(ValueError, match="TRTLLM_REPLAYSSM_.*'state_and_output' has no gdn kernel"):
        options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_MODELS": "gdn",
                          "TRTLLM_REPLAYSSM_ROUTE": "state_and_output"})
    assert options_from_env({"TRTLLM_REPLAYSSM": "1", "TRTLLM_REPLAYSSM_MODELS": "gdn",
                             "TRTLLM_REPLAYSSM_ROUTE": "always_flush"}).route == "always_flush"
    with pytest.raises(ValueError, match="an int"):
        ReplayOptions(16.0)


def test_switch_routes_are_the_kernels_routes():
    from trtllm_replayssm.integration.switch import FAMILY_ROUTES
    from trtllm_replayssm.ops.gdn import ROUTES as GDN_ROUTES
    from trtllm_replayssm.ops.mamba2 import ROUTES as MAMBA2_ROUTES
    assert FAMILY_ROUTES == {"mamba2": MAMBA2_ROUTES, "gdn": GDN_ROUTES}


def test_eras_refuse_unknown_versions_and_missing_hooks(fake_trtllm):
    fake_trtllm(version="1.2.1")
    assert detect_era(("mamba2", "gdn")).name == "trtllm-1.2"
    with pytest.raises(UnsupportedTensorRTLLM, match="0.21.0 is not supported; supported: TensorRT-LLM 1.2.x"):
        detect_era(version="0.21.0")
    with pytest.raises(UnsupportedTensorRTLLM, match="selective_state_update_native"):
        detect_era(version="1.3.0rc1")  # the 1.2 tree lacks main's hook names
    fake_trtllm(version="1.2.1", with_gdn=False)
    with pytest.raises(UnsupportedTensorRTLLM, match="modeling_qwen3_next.fused_sigmoid_gating_delta_rule_update"):
        detect_era(("mamba2", "gdn"))
    assert detect_era(("mamba2",)).name == "trtllm-1.2"


def test_apply_patches_all_or_nothing(fake_trtllm):
    fake_trtllm(with_manager=False)
    import tensorrt_llm._torch.modules.mamba.mamba2_mixer as mixer

    original = mixer.selective_state_update
    with pytest.raises(UnsupportedTensorRTLLM):
        apply_mod.apply_replayssm()
    assert mixer.selective_state_update is original and not apply_mod.applied()
    fake_trtllm()
    import tensorrt_llm._torch.modules.mamba.mamba2_mixer as mixer

    original = mixer.selective_state_update
    with pytest.raises(UnsupportedTensorRTLLM, match="one model family at a time"):
        apply_mod.apply_replayssm(models=["mamba2", "gdn"])
    with pytest.raises(UnsupportedTensorRTLLM, match=">= 1.3"):
        apply_mod.apply_replayssm(speculative=True)
    assert mixer.selective_state_update is original and not apply_mod.applied()


def test_apply_then_decode_through_the_engine_path(fake_trtllm):
    fake_trtllm()
    info = apply_mod.apply_replayssm(buffer_len=4, route="output_only")
    assert info["era"] == "trtllm-1.2" and len(info["patched"]) == 2
    from tensorrt_llm._torch.modules.mamba import mamba2_mixer
    from tensorrt_llm._torch.pyexecutor.mamba_cache_manager import MambaCacheManager

    H, P, N, G = 4, 8, 16, 2
    mgr = MambaCacheManager(2, 3, (H, P, N), H * P + 2 * G * N, device=DEVICE)
    replay = mgr._replayssm
    assert replay.rings.B_cache.shape[2] == G and replay.extra_bytes() > 0
    g = torch.Generator().manual_seed(0)
    mgr.ssm_states.copy_(torch.randn(mgr.ssm_states.shape, generator=g))
    replay.write_pos.fill_(3)  # stale cursors of earlier requests
    mgr.prepare_resources(SimpleNamespace(context_requests=[SimpleNamespace(py_request_id=7),
                                                            SimpleNamespace(py_request_id=9)]))
    assert replay.write_pos.tolist() == [0, 0, 3]  # the new requests' slots start clean
    twin = mgr.ssm_states.clone()
    idx = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    A = -(torch.rand(H, generator=g) + 0.5).to(DEVICE)
    for step in range(9):
        for layer in range(2):
            kw = dict(x=torch.randn(2, H, P, generator=g).to(DEVICE), dt=torch.randn(2, H, generator=g).to(DEVICE),
                      A=A, B=torch.randn(2, G, N, generator=g).to(DEVICE),
                      C=torch.randn(2, G, N, generator=g).to(DEVICE), dt_softplus=True, state_batch_indices=idx)
            y = mamba2_mixer.selective_state_update(mgr.ssm_states[layer], **kw)
            y_std = standard(twin[layer], **kw)
            assert ((y - y_std).norm() / y_std.norm()).item() < 1e-4, f"step {step} layer {layer}"
    assert replay.write_pos.tolist()[:2] == [9 % 4, 9 % 4]


def test_apply_gdn_on_a_kv_pool_then_mixed_batch_folds(fake_trtllm):
    """1.2's Qwen3-Next: the GDN pool is [layers, slots, HV, K, V] (read from the kernel);
    decode through the patched entry matches the engine's own kernel step for step, and a
    step that mixes prefill and decode folds the decode rows' rings first, leaving the
    exact states the engine's kernel had."""
    fake_trtllm()
    info = apply_mod.apply_replayssm(models=["gdn"], buffer_len=4, route="output_only")
    assert info["patched"][0].endswith("modeling_qwen3_next.fused_sigmoid_gating_delta_rule_update")
    from tensorrt_llm._torch.models import modeling_qwen3_next as qwen
    from tensorrt_llm._torch.pyexecutor.mamba_cache_manager import MambaCacheManager

    H, HV, K, V = 2, 4, 16, 24
    mgr = MambaCacheManager(2, 3, (HV, K, V), 2 * H * K + HV * V, device=DEVICE)
    replay = mgr._replayssm
    assert replay.gdn_pool_order == "HV,K,V" and replay.geom == GDNGeometry(H, HV, K, V)
    g = torch.Generator().manual_seed(1)
    mgr.ssm_states.copy_(torch.randn(mgr.ssm_states.shape, generator=g) * 0.3)
    req = lambda i: SimpleNamespace(py_request_id=i)  # noqa: E731
    mgr.prepare_resources(SimpleNamespace(context_requests=[req(7), req(9)]))
    twin = mgr.ssm_states.clone()
    idx = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    A_log, dt_bias = torch.zeros(HV, device=DEVICE), torch.zeros(HV, device=DEVICE)
    for step in range(9):
        for layer in range(2):
            kw = dict(A_log=A_log, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
                      q=torch.randn(2, 1, H, K, generator=g).to(DEVICE), k=torch.randn(2, 1, H, K, generator=g).to(DEVICE),
                      v=torch.randn(2, 1, HV, V, generator=g).to(DEVICE), a=torch.randn(2, 1, HV, generator=g).to(DEVICE),
                      b=torch.randn(2, 1, HV, generator=g).to(DEVICE), initial_state_indices=idx,
                      use_qk_l2norm_in_kernel=True)
            o = qwen.fused_sigmoid_gating_delta_rule_update(initial_state_source=mgr.ssm_states[layer], **kw)
            o_std = qwen.fused_sigmoid_gating_delta_rule_update.__wrapped__(initial_state_source=twin[layer], **kw)
            assert ((o - o_std).norm() / o_std.norm()).item() < 1e-4, f"step {step} layer {layer}"
    assert replay.write_pos.tolist()[:2] == [9 % 4, 9 % 4]
    assert not torch.allclose(mgr.ssm_states[:, :2], twin[:, :2], atol=1e-3)  # checkpoints, not states
    mgr.prepare_resources(SimpleNamespace(context_requests=[req(11)], generation_requests=[req(7), req(9)]))
    assert replay.write_pos.tolist() == [0, 0, 0]
    torch.testing.assert_close(mgr.ssm_states[:, :2], twin[:, :2], rtol=1e-4, atol=1e-5)


def test_autoload_patches_when_tensorrt_llm_is_imported(fake_trtllm):
    root = fake_trtllm()
    code = ("import trtllm_replayssm.integration.autoload\n"
            "import tensorrt_llm\n"
            "from trtllm_replayssm.integration.apply import applied\n"
            "print(applied().get('era'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]), TRITON_INTERPRET="1")
    on = subprocess.run([sys.executable, "-c", code], env=dict(env, TRTLLM_REPLAYSSM="1"), capture_output=True,
                        text=True, timeout=300)
    assert on.stdout.strip() == "trtllm-1.2", on.stderr
    assert "ReplaySSM on" in on.stderr  # logged once
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert off.stdout.strip() == "None", off.stderr


def test_pth_hook_install_and_effect(fake_trtllm, tmp_path, capsys):
    from trtllm_replayssm.cli import main

    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    assert main(["autoload", "status", "--site", str(site_dir)]) == 0 and "not installed" in capsys.readouterr().out
    assert main(["autoload", "install", "--site", str(site_dir)]) == 0
    root = fake_trtllm()
    code = ("import site, sys; site.addsitedir(sys.argv[1])\n"  # runs the .pth lines as at start-up
            "import tensorrt_llm\n"
            "from trtllm_replayssm.integration.apply import applied\n"
            "print(applied().get('era'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]), TRITON_INTERPRET="1",
               TRTLLM_REPLAYSSM="1")
    run = subprocess.run([sys.executable, "-c", code, str(site_dir)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.stdout.strip() == "trtllm-1.2", run.stderr
    assert main(["autoload", "remove", "--site", str(site_dir)]) == 0
    assert not (site_dir / "trtllm_replayssm_autoload.pth").exists()
