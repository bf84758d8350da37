"""The GPU benchmark scripts run end to end on the CPU (``--dry-run``: nothing is measured),
so their flow and record schema are checked between GPU sessions."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCHEMA = {"gpu", "model", "state_dtype", "act_dtype", "batch", "L", "route", "us_per_step", "baseline_us_per_step",
          "speedup", "achieved_gbps", "copy_gbps", "commit"}


def test_bench_mamba2_ar_dry_run(tmp_path):
    out = tmp_path / "mamba2.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks/bench_mamba2_ar.py"), "--dry-run", "--models", "tiny",
                    "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--l-sweep", "--replays", "1",
                    "--max-candidates", "1", "--out", str(out), "--table-dir", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=900)
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == {"standard", "output_only", "state_and_output", "always_flush", "auto"}
    assert all(SCHEMA <= set(r) for r in records)
    table = json.loads((tmp_path / "mamba2_cpu.json").read_text())
    assert any(k.startswith("route|") for k in table)


def test_bench_gdn_ar_dry_run(tmp_path):
    out = tmp_path / "gdn.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks/bench_gdn_ar.py"), "--dry-run", "--models", "tiny-gdn",
                    "--batches", "2", "--state-dtypes", "fp32", "--buffer-len", "2", "--replays", "1",
                    "--max-candidates", "1", "--out", str(out), "--table-dir", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=900)
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} >= {"standard", "output_only", "always_flush", "auto"}
    assert all(SCHEMA | {"baseline", "ring_dtype"} <= set(r) for r in records)
    assert (tmp_path / "gdn_cpu.json").exists()


def test_bench_spec_dry_run(tmp_path):
    out = tmp_path / "spec.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks/bench_spec.py"), "--dry-run", "--models", "tiny", "tiny-gdn",
                    "--batches", "2", "--tokens", "2", "--history-len", "2", "--acceptance", "all", "--steps", "3",
                    "--replays", "1", "--tune-batch", "2", "--max-candidates", "1", "--out", str(out)], check=True, capture_output=True, text=True, timeout=900)
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == {"replay_spec", "standard_spec"}
    assert {r["model"] for r in records} == {"tiny", "tiny-gdn"}
    assert all(SCHEMA | {"T", "B", "acceptance"} <= set(r) for r in records)


def test_e2e_decode_speedup_dry_run(tmp_path):
    out = tmp_path / "e2e.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks/e2e_decode_speedup.py"), "--dry-run", "--batch-size", "2",
                    "--num-steps", "5", "--warmup-steps", "2", "--buffer-len", "4", "--route", "auto",
                    "--out", str(out)], check=True, capture_output=True, text=True, timeout=900)
    records = json.loads(out.read_text())
    assert {r["route"] for r in records} == {"standard", "auto"}
    assert all(r["logits_agree"] for r in records)
    assert all({"model", "batch", "T", "state_dtype", "L", "ms_per_step", "tokens_per_s", "baseline_tokens_per_s",
                "speedup", "gpu", "commit"} <= set(r) for r in records)
