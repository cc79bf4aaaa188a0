"""A diagnostic, not the model: the two-process runs of served campaigns simulated with the API servers' streaming
costs (`output_pass_s`, `output_token_s`) times a factor, the one-process runs as fitted. The factor stands for the
cache refills of two API-server processes taking turns on one core (docs/benchmark-history/2026-12-01b-serve21.md:
measured on fit runs, real `vllm serve` 32-token bursts on the campaign's pinning); the judge then says what that
mechanism moves in the committed campaigns.

Writes, under --out-dir: `costs-scaled.json` (the --costs file with the two costs scaled) and, per --runs group
(several indexes joined with "+"), `<name>-a1.json` and `<name>-a2.json` (its runs split by API-server count), then:

    python benchmarks/ground_truth/vllm_serve_stream_scaled.py --costs $S/sim-2026-11-30c-host-busy-hop.json \
        --factor 1.43 --runs camp=$R/2026-11-30c/runs.json+$R/2026-11-30d-serve6/runs-a2.json --out-dir $OUT
    python benchmarks/ground_truth/vllm_serve_sim.py --runs $OUT/camp-a1.json --costs $S/... --out $OUT/sim-camp-a1.json ...
    python benchmarks/ground_truth/vllm_serve_sim.py --runs $OUT/camp-a2.json --costs $OUT/costs-scaled.json ...
    python benchmarks/ground_truth/vllm_serve_judge_table.py --sim $OUT/sim-camp-a1.json $OUT/sim-camp-a2.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, required=True, help="a vllm_serve_sim.py --out file (its costs)")
    parser.add_argument("--factor", type=float, required=True, help="on output_pass_s and output_token_s")
    parser.add_argument("--runs", nargs="+", default=[], metavar="NAME=INDEX[+INDEX...]")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    if not 0 < args.factor <= 10:
        parser.exit(2, f"--factor: must be a number in (0, 10], got {args.factor}\n")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    data = json.loads(args.costs.read_text())
    for name in ("output_pass_s", "output_token_s"):
        data["costs"][name] *= args.factor
    data["scaled"] = {"factor": args.factor, "costs": ["output_pass_s", "output_token_s"], "from": str(args.costs)}
    (args.out_dir / "costs-scaled.json").write_text(json.dumps(data) + "\n")
    for group in args.runs:
        if "=" not in group:
            parser.exit(2, f"--runs: {group}: must be NAME=INDEX[+INDEX...]\n")
        name, paths = group.split("=", 1)
        head: dict = {}
        runs: list = []
        for path in paths.split("+"):
            index = json.loads(Path(path).read_text())
            head = head or index
            runs += index["runs"]
        for count in (1, 2):
            part = {**head, "runs": [r for r in runs if r["api_server_count"] == count]}
            (args.out_dir / f"{name}-a{count}.json").write_text(json.dumps(part) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
