"""``apply_replayssm``: switch ReplaySSM on in this process's TensorRT-LLM.

What it does, all or nothing (every hook is checked before anything is patched):
- replaces the module-level state-update functions the Mamba2 / GDN mixers call with the
  drop-in ones of :mod:`.hooks` (decode steps on registered pools run ReplaySSM);
- extends the era's Mamba cache manager (:mod:`.era_v1_2`, :mod:`.era_main`): rings and
  cursors beside its states, counted in its memory plan, registered by the address of
  each layer's state, and kept through the life of each slot.
Logged once per process. Everything version-specific is in :mod:`.eras` and the two
adapters; none of it has run against a real install on the machines of this project.
"""

from __future__ import annotations

import importlib
import logging
from typing import Dict, Optional, Sequence

from . import era_main, era_v1_2
from .eras import UnsupportedTensorRTLLM, detect_era, supported
from .hooks import StateRegistry, gdn_state_order_of, make_gdn_update, make_mamba2_update
from .switch import ReplayOptions

log = logging.getLogger("trtllm_replayssm")
REGISTRY = StateRegistry()
_APPLIED: Dict[str, object] = {}
ADAPTERS = {"era_v1_2": era_v1_2, "era_main": era_main}  # each: missing_features(cls, opts), extend(...)


def apply_replayssm(models: Optional[Sequence[str]] = None, buffer_len: int = 16, route: str = "auto",
                    speculative: bool = False, *, options: Optional[ReplayOptions] = None,
                    version: Optional[str] = None) -> Dict[str, object]:
    """Patch TensorRT-LLM for ReplaySSM decode; returns what was patched. ``models``:
    mixer families (``mamba2``, ``gdn``). Raises :class:`UnsupportedTensorRTLLM` (nothing
    patched) for an unknown version, a missing hook or an unsupported combination."""
    opts = options or ReplayOptions(buffer_len, route, tuple(models or ("mamba2",)), speculative)
    if _APPLIED:
        if _APPLIED["options"] != opts:
            raise RuntimeError(f"ReplaySSM is already applied with {_APPLIED['options']}")
        return dict(_APPLIED)
    era = detect_era(opts.families, version)
    if opts.speculative and not era.speculative:
        raise UnsupportedTensorRTLLM(f"{era.name} has no speculative decode for these models; "
                                     "speculative ReplaySSM needs TensorRT-LLM >= 1.3")
    gdn_order = None
    if "gdn" in opts.families:
        if "mamba2" in opts.families:
            raise UnsupportedTensorRTLLM("one model family at a time: models=['mamba2'] (Nemotron-H) or ['gdn'] "
                                         "(Qwen3-Next / Qwen3.5); the engine's SSM pool holds one of them")
        hook = next(h for h in era.hooks if h.family == "gdn")
        gdn_order = gdn_state_order_of(hook.resolve())
        if gdn_order is None:
            raise UnsupportedTensorRTLLM(f"{era.name}'s GDN decode kernel uses a state pool order this adapter cannot "
                                         "read (supported: [slots, HV, V, K] and [slots, HV, K, V]); nothing was "
                                         "patched")
    adapter = ADAPTERS[era.adapter]
    manager_cls = next(h for h in era.hooks if h.family == "cache").resolve()
    missing = adapter.missing_features(manager_cls, opts)
    if missing:
        raise UnsupportedTensorRTLLM(f"{manager_cls.__name__} lacks {missing}; nothing was patched. {supported()}")
    patched = []
    for hook in era.hooks:
        if hook.family not in opts.families:
            continue
        module = importlib.import_module(hook.module)
        original = getattr(module, hook.attr)
        make = make_mamba2_update if hook.family == "mamba2" else make_gdn_update
        setattr(module, hook.attr, make(original, REGISTRY))
        patched.append(f"{hook.module}.{hook.attr}")
    patched += adapter.extend(manager_cls, opts, REGISTRY, gdn_order)
    _APPLIED.update(era=era.name, options=opts, patched=tuple(patched))
    log.warning("trtllm_replayssm: ReplaySSM on (%s, L=%d, route=%s): patched %s", era.name, opts.buffer_len,
                opts.route, ", ".join(patched))
    return dict(_APPLIED)


def applied() -> Dict[str, object]:
    return dict(_APPLIED)
