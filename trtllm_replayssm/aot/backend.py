"""The backend switch: the package's Python entry points launch their kernels through
Triton's JIT or through the AOT library, with the same launch decision either way.

``TRTLLM_REPLAYSSM_BACKEND``:
- ``jit``: Triton compiles at first use (the CPU interpreter where there is no GPU);
- ``aot``: every launch goes to ``libreplayssm_kernels``; a launch it has no
  specialisation for raises (no silent JIT);
- unset: ``aot`` when the library exists and holds kernels for the device, else ``jit``;
  a launch the library lacks (a shape outside the built set) then runs on the JIT.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Dict, Optional

import torch

from ..ops.launch import pop_launcher, push_launcher
from .library import KernelLibrary, RSValue, load

log = logging.getLogger("trtllm_replayssm")
ENV = "TRTLLM_REPLAYSSM_BACKEND"


class AOTLauncher:
    """A launcher (see :func:`~trtllm_replayssm.ops.launch.push_launcher`) that hands CUDA
    launches to the AOT library. ``strict``: a launch without a built specialisation raises."""

    # The library launches a kernel the build recorded with ``launch_pdl`` as a programmatic
    # dependent launch too (ops.launch.programmatic_launch_allowed).
    programmatic_launches = True

    def __init__(self, lib: KernelLibrary, strict: bool):
        self.lib, self.strict = lib, strict
        self._keys: Dict[int, set] = {}  # kernel keys the library holds, per arch (read once)
        self.launches = 0  # AOT launches made (tests read it)
        self.programmatic_launches_made = 0  # of which kernels built as programmatic dependent launches
        self._warned = False

    def tables_for(self, arch: str) -> str:
        """The tuned tables the library was built from for ``arch`` (``sm90``): while it
        is in front the dispatcher reads those (ops.launch.device_table_tag), so that its
        launches are the ones the library holds, whichever GPU runs them."""
        return (self.lib.table_tag(int(arch[2:])) if arch[2:].isdigit() else None) or arch

    def _arch(self, device: torch.device) -> int:
        major, minor = torch.cuda.get_device_capability(device)
        return major * 10 + minor

    def __call__(self, kernel, grid, kwargs) -> bool:
        from .specs import spec_of

        device = next((v.device for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
        if device is None or device.type != "cuda":
            return False
        arch = self._arch(device)
        keys = self._keys.get(arch)
        if keys is None:
            keys = self._keys[arch] = self.lib.kernel_keys(arch)
        spec = spec_of(kernel, kwargs)
        key = spec.key
        if key not in keys:
            if self.strict:
                raise RuntimeError(f"TRTLLM_REPLAYSSM_BACKEND=aot: no AOT kernel {key} for sm_{arch} "
                                   f"({spec.kernel}, {dict(spec.constexprs)}); rebuild with `trtllm-replayssm aot "
                                   f"build` covering this shape, or use the jit backend")
            if not self._warned:
                log.warning("trtllm_replayssm: a launch outside the AOT build (%s) runs on Triton's JIT", key)
                self._warned = True
            return False
        values = (RSValue * max(len(spec.params), 1))()
        for i, p in enumerate(spec.params):
            v = kwargs[p.name]
            if isinstance(v, torch.Tensor):
                values[i].p = v.data_ptr()
            elif isinstance(v, float):
                values[i].f = v
            else:
                values[i].i = int(v)
        stream = torch.cuda.current_stream(device).cuda_stream
        g = tuple(grid) + (1,) * (3 - len(grid))
        with torch.cuda.device(device):
            status = self.lib.lib.rs_launch_kernel(key.encode(), g[0], g[1], g[2], values, len(spec.params),
                                                   ctypes.c_void_p(stream))
        self.lib.check(status, f"AOT launch of {key}")
        self.launches += 1
        self.programmatic_launches_made += spec.programmatic
        return True


class _Unavailable:
    """``aot`` was asked for without a usable library: every launch raises."""

    launches = 0

    def __call__(self, kernel, grid, kwargs) -> bool:
        raise RuntimeError(f"{ENV}=aot but no libreplayssm_kernels with kernels for this device was found (build "
                           f"it: cmake -S . -B build && cmake --build build, or set TRTLLM_REPLAYSSM_LIBRARY)")


_active: Optional[AOTLauncher] = None


def activate(mode: Optional[str] = None, library: Optional[str] = None) -> str:
    """Switch the backend (``mode``: ``aot``, ``jit`` or None for the environment's, then
    auto). Returns the backend now in use."""
    global _active
    mode = (mode or os.environ.get(ENV, "")).strip().lower() or "auto"
    if mode not in ("aot", "jit", "auto"):
        raise ValueError(f"{ENV} must be aot or jit, got {mode!r}")
    if _active is not None:
        pop_launcher(_active)
        _active = None
    if mode == "jit":
        return "jit"
    lib = load(library)
    usable = lib is not None and torch.cuda.is_available()
    if usable:
        major, minor = torch.cuda.get_device_capability()
        usable = lib.has_arch(10 * major + minor)
    if not usable:
        if mode == "aot":  # refuse at the first launch, not at import (the AOT build imports this too)
            _active = _Unavailable()
            push_launcher(_active)
            return "aot (unavailable)"
        return "jit"
    _active = AOTLauncher(lib, strict=mode == "aot")
    push_launcher(_active)
    return "aot"


def active_launcher() -> Optional[AOTLauncher]:
    return _active
