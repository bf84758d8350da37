"""Ahead-of-time build: compile every specialisation of :mod:`.specs` for the chosen
architectures with ``triton.compile`` and an explicit target (no GPU needed), and write

    OUT/manifest.json                  kernels, specialisation keys, params, launch facts, op cases
    OUT/sm<arch>/<spec key>.cubin      one cubin per architecture (sm_90+ cubins are arch-specific)
    OUT/replayssm_kernels_table.c      the C library's tables (generated data, no logic)
    OUT/replayssm_cubins.S             the cubins embedded with .incbin

Run it as ``trtllm-replayssm aot build --arch 80,90,100 --out DIR``; the launch configs
come from the architectures' tuned tables, or with ``--gpu NAME`` from that GPU's own
where the package has one (``ops/launch.py: table_tag``; the library then says which,
``rs_table_tag``, and the Python backend reads the same tables). Triton decides
between compiling and interpreting when a kernel module is imported, so the build runs
in a process with ``TRITON_INTERPRET=0`` (:func:`main` re-executes itself if needed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence

FORMAT_VERSION = 1


def source_type(kernel):
    """The compiler front end of ``kernel``: Triton's, or Gluon's for a ``@gluon.jit``
    kernel (explicit layouts; the C launcher binds its arguments by name all the same)."""
    from triton.compiler import ASTSource

    try:
        from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    except ImportError:  # a Triton without Gluon
        return ASTSource
    return GluonASTSource if isinstance(kernel, GluonJITFunction) else ASTSource


def spec_job(key: str, spec) -> dict:
    """A :class:`~.specs.KernelSpec` as :func:`_compile_one` takes it and the manifest
    records it (plain data, to cross to a worker process)."""
    return dict(key=key, kernel=spec.kernel, constexprs=[list(c) for c in spec.constexprs], num_warps=spec.num_warps,
                params=[vars(p) for p in spec.params], **({"maxnreg": spec.maxnreg} if spec.maxnreg else {}),
                **({"programmatic": True} if spec.programmatic else {}))


def _compile_one(job):
    """Compile one spec for one arch; returns the manifest facts and writes the cubin."""
    import triton
    from triton.backends.compiler import GPUTarget

    from .specs import find_kernel

    spec_dict, arch, out_dir = job
    kernel = find_kernel(spec_dict["kernel"])
    names = kernel.arg_names
    signature = {p["name"]: p["type"] for p in spec_dict["params"]}
    constexprs = {}
    for name, value in spec_dict["constexprs"]:
        signature[name] = "constexpr"
        constexprs[(names.index(name),)] = value
    for p in kernel.params:  # unused constexprs with defaults are still part of the signature
        signature.setdefault(p.name, "constexpr")
    attrs = {(names.index(p["name"]),): [["tt.divisibility", 16]] for p in spec_dict["params"] if p["div16"]}
    src = source_type(kernel)(kernel, {n: signature[n] for n in names}, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": spec_dict["num_warps"]}
    if spec_dict.get("maxnreg"):
        options["maxnreg"] = spec_dict["maxnreg"]
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    md = compiled.metadata
    path = Path(out_dir) / f"sm{arch}" / f"{spec_dict['key']}.cubin"
    path.write_bytes(compiled.asm["cubin"])
    return dict(key=spec_dict["key"], arch=arch, name=md.name, num_warps=md.num_warps, shared=md.shared,
                global_scratch_size=md.global_scratch_size, profile_scratch_size=md.profile_scratch_size,
                cubin=str(path.relative_to(out_dir)), cubin_bytes=path.stat().st_size)


def build(archs: Sequence[int], out_dir: Path, workers: int = 2, buffer_lens=(16,), quiet: bool = False,
          spec_tokens: Optional[Sequence[int]] = None, gpu: str = "") -> dict:
    """``spec_tokens``: the speculative verify's tokens a step (T = 1 + drafts) to build
    for (default :data:`.specs.SPEC_TOKENS`). An engine runs one draft length, and each T
    adds about a hundred kernels an arch (sm_90: 737 for the default four, 452 for T = 4).
    ``gpu``: the product name of the GPU whose tuned tables give the configs (as
    ``torch.cuda.get_device_name`` says it; default: the architectures' tables)."""
    from ..ops.launch import table_tag
    from .specs import SPEC_TOKENS, op_cases, unique_specs
    from . import c_table

    spec_tokens = tuple(sorted(set(spec_tokens or SPEC_TOKENS)))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    kernels: List[dict] = []
    cases: List[dict] = []
    tags = {arch: table_tag(f"sm{arch}", gpu) for arch in archs}
    for arch in archs:
        (out_dir / f"sm{arch}").mkdir(exist_ok=True)
        arch_cases = op_cases(tags[arch], buffer_lens, spec_tokens=spec_tokens)
        specs = unique_specs(arch_cases)
        spec_dicts = {k: spec_job(k, s) for k, s in specs.items()}
        jobs = [(d, arch, str(out_dir)) for d in spec_dicts.values()]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for i, facts in enumerate(pool.map(_compile_one, jobs, chunksize=4)):
                kernels.append({**spec_dicts[facts["key"]], **facts})
                if not quiet and (i + 1) % 25 == 0:
                    print(f"sm{arch}: {i + 1}/{len(jobs)} compiled [{time.time() - t0:.0f}s]", flush=True)
        for c in arch_cases:
            if c.kernels_only:  # (compiled above; not a case of the C library)
                continue
            cases.append(dict(arch=arch, op=c.op, key=c.key_string(), batch=c.batch,
                              launches=[dict(spec=s.key, grid=list(g), side_stream=i in c.side_launches)
                                        for i, (s, g) in enumerate(c.launches)]))
    import triton

    manifest = dict(format=FORMAT_VERSION, triton=triton.__version__, archs=list(archs), spec_tokens=list(spec_tokens),
                    table_tags={str(a): t for a, t in tags.items()}, kernels=kernels, cases=cases)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    c_table.write(manifest, out_dir)
    if not quiet:
        print(f"{len(kernels)} cubins for {', '.join(f'sm_{a}' for a in archs)}, {len(cases)} op cases -> {out_dir} "
              f"[{time.time() - t0:.0f}s]")
    return manifest


def parse_archs(text: str) -> List[int]:
    archs = [int(a.strip().replace("sm_", "").replace("sm", "")) for a in text.split(",") if a.strip()]
    for a in archs:
        if a < 80:
            raise SystemExit(f"unsupported arch {a}: the kernels need sm_80 or newer")
    return archs


def spec_token_count(text: str) -> int:
    """argparse type of ``--spec-tokens``: a verify's tokens a step, 1 to the kernels' MAX_T."""
    from ..ops.mamba2.spec import MAX_T

    value = int(text)
    if not 1 <= value <= MAX_T:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_T}], got {value}")
    return value


def main(argv=None) -> int:
    from .._validation import positive_int
    from .specs import SPEC_TOKENS

    ap = argparse.ArgumentParser(prog="trtllm-replayssm aot build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="80,90,100", help="comma-separated compute capabilities (80,90,100)")
    ap.add_argument("--out", default="build/aot", help="output folder")
    ap.add_argument("--buffer-len", type=positive_int, nargs="+", default=[16], help="ring lengths L to build for")
    ap.add_argument("--spec-tokens", type=spec_token_count, nargs="+", default=list(SPEC_TOKENS), metavar="T",
                    help="speculative verify tokens a step (1 + drafts) to build for: the draft length your engine "
                         "runs (default: %(default)s)")
    ap.add_argument("--gpu", default="", metavar="NAME",
                    help="take the launch configs from this GPU's own tuned tables where the package has them "
                         "(its name as torch.cuda.get_device_name gives it, e.g. 'NVIDIA H100 80GB HBM3'); "
                         "default: the architectures' tables")
    ap.add_argument("--workers", type=positive_int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":  # kernels were imported for the interpreter
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        return subprocess.call([sys.executable, "-m", "trtllm_replayssm.aot.build", *(argv or sys.argv[1:])], env=env)
    os.environ["TRITON_INTERPRET"] = "0"
    build(parse_archs(args.arch), Path(args.out), args.workers, tuple(args.buffer_len), args.quiet, args.spec_tokens,
          args.gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
