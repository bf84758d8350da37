"""Capacity planning: geometry from Hugging Face configs and the extra bytes per slot."""

import json

import pytest

from trtllm_replayssm.cli import main
from trtllm_replayssm.integration.hf_config import from_hf_config, load_ssm_model
from trtllm_replayssm.integration.memory import replay_memory
from trtllm_replayssm.ops.mamba2.spec import ring_capacity
from trtllm_replayssm.models import model

NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "mamba_num_heads": 96, "mamba_head_dim": 80,
              "ssm_state_size": 128, "n_groups": 8, "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"}
QWEN35 = {
          "text_config": {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
                          "linear_value_head_dim": 128, "num_hidden_layers": 32,
                          "layer_types": ["linear_attention"] * 3 + ["full_attention"]}}
QWEN3_NEXT = {"linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "num_hidden_layers": 48, "full_attention_interval": 4}


def test_hf_configs_match_the_built_in_table():
    nano = from_hf_config(NEMOTRON_H)
    assert (nano.geom, nano.num_ssm_layers) == (model("nemotron-3-nano-4b").geom, 21)
    q = from_hf_config({**QWEN35, "text_config": {**QWEN35["text_config"], "layer_types":
                                                  (["linear_attention"] * 3 + ["full_attention"]) * 8}})
    assert (q.geom, q.num_ssm_layers) == (model("qwen3.5-4b").geom, 24)
    assert from_hf_config(QWEN3_NEXT).num_ssm_layers == 36


def test_unknown_config_is_refused():
    with pytest.raises(ValueError, match="neither"):
        from_hf_config({"hidden_size": 4096})


def test_incomplete_or_broken_configs_name_what_is_wrong(tmp_path):
    """A field missing from a recognised config is named (it had surfaced as a bare
    KeyError), and a file that is not JSON says so with its path."""
    with pytest.raises(ValueError, match="Mamba2 hybrid config needs mamba_head_dim"):
        from_hf_config({"mamba_num_heads": 8, "ssm_state_size": 128})
    with pytest.raises(ValueError, match="needs num_hidden_layers"):
        from_hf_config({"linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
                        "linear_value_head_dim": 128})
    (tmp_path / "config.json").write_text("not json")
    with pytest.raises(ValueError, match="config.json: not a JSON config"):
        load_ssm_model(str(tmp_path))


def test_extra_bytes_are_exact():
    m = model("nemotron-3-nano-4b")
    mem = replay_memory(m, max_batch=256, buffer_len=16)
    H, P, N, G, L = 96, 80, 128, 8, 16
    per_layer = H * L * P * 2 + H * L * 4 + G * L * N * 2  # x (bf16), dt (fp32), B (bf16)
    assert mem["extra_per_slot"] == 21 * per_layer + 4
    assert mem["extra_total"] == 256 * mem["extra_per_slot"]
    assert mem["checkpoint_per_slot"] == 21 * H * P * N * 4


def test_gdn_extra_bytes_follow_the_ring_dtype():
    """GDN rings take the state dtype's ring dtype (bf16 beside a bf16 state); a verify's
    circular rings stay fp32."""
    m = model("qwen3.5-4b")
    H, HV, K, V, L = 16, 32, 128, 128, 16
    per_layer = {4: HV * L * V * 4 + H * L * K * 4 + HV * L * 4, 2: HV * L * V * 2 + H * L * K * 2 + HV * L * 4}
    for state_dtype, size in (("fp32", 4), ("bf16", 2)):
        mem = replay_memory(m, max_batch=8, buffer_len=L, state_dtype=state_dtype)
        assert mem["extra_per_slot"] == m.num_ssm_layers * per_layer[size] + 4
    spec = replay_memory(m, max_batch=8, buffer_len=L, state_dtype="bf16", spec_tokens=4)
    C = ring_capacity(4, L)
    assert spec["extra_per_slot"] == m.num_ssm_layers * (HV * C * V * 4 + H * C * K * 4 + HV * C * 4) + 9


def test_memory_command_reads_a_config_file(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_H))
    assert load_ssm_model(str(tmp_path)).num_ssm_layers == 21
    assert main(["memory", "--model", str(tmp_path / "config.json"), "--max-batch", "8", "--buffer-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "21 mamba2 layers" in out and "bytes per slot" in out
    assert main(["memory", "--model", "qwen3.5-122b", "--max-batch", "64"]) == 0


def test_speculative_rings_and_what_the_standard_spec_path_keeps(capsys):
    m = model("nemotron-3-nano-4b")
    mem = replay_memory(m, max_batch=256, buffer_len=16, spec_tokens=4)
    H, P, N, G, L = 96, 80, 128, 8, ring_capacity(4, 16)
    assert L == 32 and mem["ring_len"] == L
    assert mem["extra_per_slot"] == 21 * (H * L * P * 2 + H * L * 4 + G * L * N * 2) + 9  # write_pos, origin, flag
    assert mem["standard_spec_total"] == 4 * mem["checkpoint_per_slot"] * 256
    assert main(["memory", "--model", "nemotron-3-nano-4b", "--max-batch", "256", "--spec-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "circular rings of 32" in out and "4 intermediate states" in out
