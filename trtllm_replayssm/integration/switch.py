"""The environment switch, read the same way in every process (the CLI and the spawned
executor workers: ``trtllm-serve --custom_module_dirs`` imports only in the CLI process).

    TRTLLM_REPLAYSSM=1                    turn ReplaySSM on (anything else: off)
    TRTLLM_REPLAYSSM_BUFFER_LEN=16        ring length L (1..64)
    TRTLLM_REPLAYSSM_ROUTE=auto           auto | output_only | state_and_output (mamba2) | standard_step | always_flush
    TRTLLM_REPLAYSSM_MODELS=mamba2        which mixer family to patch: mamba2 or gdn (one at a time)
    TRTLLM_REPLAYSSM_SPEC=1               replay for speculative verify too (TensorRT-LLM 1.3+)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

FAMILIES = ("mamba2", "gdn")
# Each family's kernel routes (the ops' ROUTES; kept here so that the switch imports no
# kernels, and tested equal to them).
FAMILY_ROUTES = {"mamba2": ("output_only", "state_and_output", "standard_step", "always_flush"),
                 "gdn": ("output_only", "standard_step", "always_flush")}
ROUTES = ("auto", *FAMILY_ROUTES["mamba2"])


@dataclass(frozen=True)
class ReplayOptions:
    buffer_len: int = 16
    route: str = "auto"
    families: Tuple[str, ...] = ("mamba2",)  # one family a process: the engine's SSM pool holds one
    speculative: bool = False

    def __post_init__(self):
        if isinstance(self.buffer_len, bool) or not isinstance(self.buffer_len, int) or not 1 <= self.buffer_len <= 64:
            raise ValueError(f"buffer length must be an int in [1, 64], got {self.buffer_len!r}")
        if self.route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {self.route!r}")
        unknown = set(self.families) - set(FAMILIES)
        if unknown or not self.families:
            raise ValueError(f"models must be a non-empty subset of {FAMILIES}, got {self.families}")
        for family in self.families:  # (else the engine's cache manager would raise it, at start-up)
            if self.route != "auto" and self.route not in FAMILY_ROUTES[family]:
                raise ValueError(f"route {self.route!r} has no {family} kernel; {family} takes "
                                 f"{('auto', *FAMILY_ROUTES[family])}")


def options_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[ReplayOptions]:
    """``None`` unless ``TRTLLM_REPLAYSSM=1``; a bad value raises, naming the variable."""
    env = os.environ if env is None else env
    if env.get("TRTLLM_REPLAYSSM", "0") != "1":
        return None
    try:
        buffer_len = int(env.get("TRTLLM_REPLAYSSM_BUFFER_LEN", "16"))
    except ValueError:
        raise ValueError(f"TRTLLM_REPLAYSSM_BUFFER_LEN must be an integer, got "
                         f"{env['TRTLLM_REPLAYSSM_BUFFER_LEN']!r}") from None
    families = tuple(f.strip() for f in env.get("TRTLLM_REPLAYSSM_MODELS", "mamba2").split(",") if f.strip())
    try:
        return ReplayOptions(buffer_len, env.get("TRTLLM_REPLAYSSM_ROUTE", "auto"), families,
                             env.get("TRTLLM_REPLAYSSM_SPEC", "0") == "1")
    except ValueError as e:
        raise ValueError(f"TRTLLM_REPLAYSSM_*: {e}") from None
