import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# The harness modules live beside the tests.
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import torch  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (real shapes)")


# -- the ahead-of-time build (tests/aot): built once per test run, where a test asks for it --
REPO = Path(__file__).resolve().parents[1]
BUILT_SPEC_TOKENS = 4  # the verify's T of the tests' build


def _built_once(tmp_path_factory, name: str, make) -> Path:
    """``make(folder)`` run once for the whole test run, however many xdist workers ask.

    A session fixture runs once per worker; each worker building the 650 cubins on CI's
    2 cores doubled the run's time. Workers share the session's base folder, and the
    first to take the lock builds there while the others wait for it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # no xdist: this process's own folder
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # this run's folder, above every worker's
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def aot_build(tmp_path_factory) -> Path:
    """``trtllm-replayssm aot build --arch 90 --spec-tokens 4`` (what CI checks: it needs no
    GPU). One draft length, as an engine builds: the tests verify with T = 4, and the
    default's other three (2, 3, 6) would add 285 kernels to its 452 and double the build's
    time on 2 cores (273 s against 137 s). ``test_default_build_covers_every_draft_length``
    checks the default's cases without compiling them."""
    def make(out):
        env = {**os.environ, "TRITON_INTERPRET": "1"}  # the build must leave the interpreter by itself
        subprocess.run([sys.executable, "-m", "trtllm_replayssm.cli", "aot", "build", "--arch", "90", "--spec-tokens",
                        str(BUILT_SPEC_TOKENS), "--out", str(out), "--workers", str(min(8, os.cpu_count() or 1)),
                        "--quiet"], check=True, env=env, cwd=REPO, timeout=1200)

    return _built_once(tmp_path_factory, "aot", make)


@pytest.fixture(scope="session")
def manifest(aot_build) -> dict:
    return json.loads((aot_build / "manifest.json").read_text())


@pytest.fixture(scope="session")
def kernel_library(aot_build, tmp_path_factory) -> Path:
    """``libreplayssm_kernels.so`` built by CMake from the AOT output, against CUDA's headers."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")

    def make(build):
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), f"-DREPLAYSSM_AOT_DIR={aot_build}",
                        "-DREPLAYSSM_ARCHS=90", f"-DPython3_EXECUTABLE={sys.executable}"], check=True, timeout=300,
                       capture_output=True, text=True)
        subprocess.run(["cmake", "--build", str(build), "-j", "2", "--target", "replayssm_kernels"], check=True,
                       timeout=600, capture_output=True, text=True)

    return _built_once(tmp_path_factory, "cmake", make) / "libreplayssm_kernels.so"


class TRTPlugins:
    """``libreplayssm_trt_plugins.so`` built against TensorRT's headers, and how to build a
    program that drives it (tests/aot/trt_plugin_*.cpp: TensorRT's headers, cudart)."""

    def __init__(self, library: Path, includes, cudart: Path):
        self.library, self.includes, self.cudart = library, includes, cudart

    def compile(self, source: Path, out: Path) -> Path:
        subprocess.run(["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-Wno-deprecated-declarations",
                        *[f"-isystem{d}" for d in self.includes], str(source), "-o", str(out), str(self.cudart),
                        f"-Wl,-rpath,{self.cudart.parent}", "-ldl"], check=True, timeout=300)
        return out


@pytest.fixture(scope="session")
def trt_plugins(aot_build, tmp_path_factory) -> TRTPlugins:
    """The plugins built by CMake against TRT_INCLUDE_DIR (TensorRT 10.x or 11.x headers)."""
    inc = os.environ.get("TRT_INCLUDE_DIR")
    if not inc or not (Path(inc) / "NvInferRuntime.h").exists():
        pytest.skip("TRT_INCLUDE_DIR does not point at TensorRT's include/ (the headers are not shipped here)")
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")

    def make(build):
        subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), f"-DREPLAYSSM_AOT_DIR={aot_build}",
                        "-DREPLAYSSM_ARCHS=90", f"-DTRT_INCLUDE_DIR={inc}", f"-DPython3_EXECUTABLE={sys.executable}"],
                       check=True, timeout=300, capture_output=True, text=True)
        subprocess.run(["cmake", "--build", str(build), "-j", "4"], check=True, timeout=900, capture_output=True,
                       text=True)

    build = _built_once(tmp_path_factory, "trt_plugins", make)
    library = build / "libreplayssm_trt_plugins.so"
    if not library.exists():
        pytest.skip("CMake found no CUDA toolkit (cudart), so it built the kernel library only")
    cache = dict(line.split("=", 1) for line in (build / "CMakeCache.txt").read_text().splitlines()
                 if "=" in line and not line.startswith(("#", "//")))
    # (TensorRT's headers include cuda_runtime_api.h: the toolkit's, next to cuda.h)
    return TRTPlugins(library, [Path(inc), Path(cache["CUDA_DRIVER_INCLUDE_DIR:PATH"])],
                      Path(cache["CUDA_cudart_LIBRARY:FILEPATH"]))


# -- stand-in TensorRT-LLM packages (tests/integration): each written to a folder of its own,
# first on the path, and forgotten afterwards with whatever was patched --
def _forget_trtllm():
    for name in [m for m in sys.modules if m == "tensorrt_llm" or m.startswith("tensorrt_llm.")]:
        del sys.modules[name]


def _stand_ins(writer_name, tmp_path, monkeypatch):
    from fake_trtllm import write_fake_trtllm, write_fake_trtllm_main  # tests/integration, on the path there
    from trtllm_replayssm.integration import apply as apply_mod

    writer = {"1.2": write_fake_trtllm, "main": write_fake_trtllm_main}[writer_name]
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
    yield from _stand_ins("1.2", tmp_path, monkeypatch)


@pytest.fixture
def main_trtllm(tmp_path, monkeypatch):
    """A writer of TensorRT-LLM main (>= 1.3) stand-ins."""
    yield from _stand_ins("main", tmp_path, monkeypatch)
