"""Measurement helpers shared by the CLI and ``benchmarks/`` (method: ``replayssm.md`` section 6)."""
