"""trtllm_replayssm: ReplaySSM decode kernels for hybrid SSM models in TensorRT-LLM."""

from setuptools import find_packages, setup

setup(
    name="trtllm_replayssm",
    version="0.1.0",
    description="ReplaySSM decode kernels (Mamba2, Gated DeltaNet) for TensorRT-LLM",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["trtllm_replayssm", "trtllm_replayssm.*"]),
    package_data={"trtllm_replayssm": ["tuned/*.json", "lib/*.so"]},  # lib/: a built libreplayssm_kernels
    install_requires=[
        # On a CPU machine install torch==2.13.0 first (the README says how) so pip does
        # not pull a multi-GB CUDA build; GPU machines bring their own torch and triton.
        "torch>=2.6",
        "triton>=3.4",
        "numpy",
        "tabulate",
        "tqdm",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist", "filelock", "matplotlib", "tritonclient[grpc]", "pyyaml"],
        "bench": ["matplotlib"],
    },
    entry_points={"console_scripts": ["trtllm-replayssm=trtllm_replayssm.cli:main"]},
)
