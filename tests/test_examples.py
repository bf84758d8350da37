"""The example deployment files parse: Triton's model config with the protobuf that
tritonclient ships, the YAML files as TensorRT-LLM's LLM API would read them."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "examples/triton_server/model_repository/tensorrt_llm"


def test_triton_config_pbtxt_parses():
    mc = pytest.importorskip("tritonclient.grpc.model_config_pb2", reason="tritonclient[grpc] is not installed")
    from google.protobuf import text_format

    cfg = text_format.Parse((MODEL / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.name == MODEL.name and cfg.backend == "python"
    assert [i.name for i in cfg.input][0] == "text_input" and [o.name for o in cfg.output] == ["text_output"]


def test_yaml_options():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    for p in (MODEL / "1/model.yaml", REPO / "examples/trtllm_serve/nemotron_nano_4b.yaml",
              REPO / "examples/trtllm_serve/qwen3_next.yaml", REPO / "examples/trtllm_serve/qwen3_5_main.yaml",
              REPO / "examples/trtllm_serve/nemotron_mtp_main.yaml"):
        opts = yaml.safe_load(p.read_text())
        assert opts["kv_cache_config"]["enable_block_reuse"] is False, p
        if p.name.endswith("_main.yaml"):  # main: ReplaySSM's rings live in the V2 manager's pages
            assert opts["kv_cache_config"]["use_kv_cache_manager_v2"] is True, p
        assert not any("replay" in k.lower() for k in opts), f"{p}: TensorRT-LLM rejects unknown keys"
