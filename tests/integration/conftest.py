"""Fixtures of the integration tests: stand-in TensorRT-LLM packages, each written to a
folder of its own, first on the path, and forgotten afterwards with whatever was patched."""

import sys

import pytest

from fake_trtllm import write_fake_trtllm, write_fake_trtllm_main
from trtllm_replayssm.integration import apply as apply_mod


def _forget_trtllm():
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]


def _stand_ins(writer, tmp_path, monkeypatch):
    made = []

    def make(**kw):
        _forget_trtllm()
        root = writer(tmp_path / f"site{len(made)}", **kw)
        monkeypatch.syspath_prepend(str(root))
        made.append(root)
        return root

    yield make
    _forget_trtllm()
    apply_mod._APPLIED.clear()
    apply_mod.REGISTRY.clear()


@pytest.fixture
def fake_trtllm(tmp_path, monkeypatch):
    """A writer of TensorRT-LLM 1.2 stand-ins."""
    yield from _stand_ins(write_fake_trtllm, tmp_path, monkeypatch)


@pytest.fixture
def main_trtllm(tmp_path, monkeypatch):
    """A writer of TensorRT-LLM main (>= 1.3) stand-ins."""
    yield from _stand_ins(write_fake_trtllm_main, tmp_path, monkeypatch)
