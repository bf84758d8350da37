"""Imported at every interpreter start by the ``.pth`` file this package installs; does
nothing unless ``TRTLLM_REPLAYSSM=1``. Then it patches TensorRT-LLM as soon as it is
imported in this process (the ``trtllm-serve`` CLI and each spawned executor worker),
without importing TensorRT-LLM, torch or Triton itself before that."""

from __future__ import annotations

import os
import sys


def _install() -> None:
    if os.environ.get("TRTLLM_REPLAYSSM", "0") != "1":
        return
    import importlib.abc
    import importlib.machinery

    class _PatchOnImport(importlib.abc.MetaPathFinder):
        """Runs ``apply_replayssm`` right after ``tensorrt_llm`` finishes importing."""

        def find_spec(self, name, path=None, target=None):
            if name != "tensorrt_llm":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                from .apply import apply_replayssm
                from .switch import options_from_env

                apply_replayssm(options=options_from_env())

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _PatchOnImport())


_install()
