"""Where the Triton kernels run: on a CUDA device, or in Triton's CPU interpreter.

Imported first by the package: Triton decides between compiling and interpreting when a
kernel is decorated, so ``TRITON_INTERPRET`` has to be settled before any kernel module
is imported. On a machine without a CUDA device we switch the interpreter on (unless the
user chose explicitly), which is how CI and CPU-only development run the kernels.
"""

from __future__ import annotations

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRETED: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"


def default_device() -> torch.device:
    """The device kernels run on here: CUDA when present, else the CPU (interpreter)."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def device_arch(device: torch.device) -> str:
    """A short name of the device's architecture for launch tables: ``sm90``, ``cpu``."""
    if device.type != "cuda":
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm{major}{minor}"


# Skip interpreter work that changes no result (``_interpreter``); CI runs this way.
if INTERPRETED:
    from ._interpreter import install

    install()
