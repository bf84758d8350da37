"""The ``.pth`` hook that makes the environment switch reach every Python process of an
environment (TensorRT-LLM spawns its executor workers; ``--custom_module_dirs`` imports in
the CLI process only). Python runs a ``.pth`` line that starts with ``import`` at start-up;
this one imports the autoload only when ``TRTLLM_REPLAYSSM=1``, so other processes pay
nothing."""

from __future__ import annotations

import site
from pathlib import Path
from typing import Optional

PTH_NAME = "trtllm_replayssm_autoload.pth"
PTH_LINE = ('import os; os.environ.get("TRTLLM_REPLAYSSM", "0") == "1" and '
            '__import__("trtllm_replayssm.integration.autoload")\n')


def site_dir(target: Optional[str] = None) -> Path:
    return Path(target) if target else Path(site.getsitepackages()[0])


def install(target: Optional[str] = None) -> Path:
    p = site_dir(target) / PTH_NAME
    p.write_text(PTH_LINE)
    return p


def remove(target: Optional[str] = None) -> bool:
    p = site_dir(target) / PTH_NAME
    if p.exists():
        p.unlink()
        return True
    return False


def status(target: Optional[str] = None) -> Optional[Path]:
    p = site_dir(target) / PTH_NAME
    return p if p.exists() and p.read_text() == PTH_LINE else None
