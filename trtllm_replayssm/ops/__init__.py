"""Kernels, one module per op (kernel, wrapper and naive reference side by side)."""
