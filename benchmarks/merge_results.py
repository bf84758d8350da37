"""Merge benchmark runs' records into a committed results file, case by case.

A device call writes its run under ``$OUT`` (``--out``), not into the repository; this
puts those records where a run without ``--out`` would have: in place of the file's
records of the same cases, the others kept (``benchmarking.records.ResultsFile``, which
also refuses records of another GPU than the file's).

    python benchmarks/merge_results.py gdn_ar RUN.json [RUN.json ...]   # -> results/gdn_ar.json
    python benchmarks/report_results.py gdn_ar                          # the README's table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trtllm_replayssm.benchmarking.records import RESULTS, ResultsFile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", help="the results file's name: mamba2_ar, gdn_ar, spec, e2e, ...")
    ap.add_argument("runs", nargs="+", type=Path, help="records written by runs (their --out)")
    ap.add_argument("--results", type=Path, default=None, help="default: benchmarks/results/<kind>.json")
    args = ap.parse_args()
    records = [r for run in args.runs for r in json.loads(run.read_text())]
    gpus = sorted({str(r.get("gpu")) for r in records})
    if len(gpus) != 1:
        sys.exit(f"the runs' records come from {len(gpus)} GPUs ({', '.join(gpus)}): merge one GPU's at a time")
    target = args.results or RESULTS / f"{args.kind}.json"
    ResultsFile(target, gpus[0]).write(records)
    print(f"{target}: {len(records)} records merged from {len(args.runs)} run(s)")


if __name__ == "__main__":
    main()
