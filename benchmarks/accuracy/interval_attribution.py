"""Where the rows outside `interval_coverage.py`'s intervals miss: the central value's error against the interval's
half-width on the side of the measured value. A diagnosis of the judge's rows; nothing here changes an interval or is
fitted into one.

    python benchmarks/accuracy/interval_attribution.py --cache $OUT/cache/<identity>-l80-n8-s0

Per metric (mean TTFT, mean TPOT), overall and per GPU:
- the central value's signed error (central / measured - 1; median over the rows): its bias;
- for the rows outside, the miss in units of the interval's half-width on the measured side (|measured - central| /
  |bound - central|; 1 = on the bound): the median, and the share whose measured value lies beyond twice the
  half-width (a miss that no spread of the sampled sources' size reaches: the central value's bias);
- the share outside whose measured value lies on the side the central value's bias points to (below when the
  central is high, above when low);
- `--noise-from PROFILE`: the coverage had each sample's TTFT / TPOT carried the run-to-run noise that PROFILE's host
  states (`host.served_run_to_run_noise`, drawn as `--intervals` draws it, seed 0): what that source would add, as a
  what-if (the judge's GPU hosts do not state it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_accuracy import SYSTEM_ORDER  # noqa: E402

from roofline.sim.intervals import IntervalSpec, apply_noise  # noqa: E402


def load_rows(cache: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(cache.glob("*.json"))]


def attribute(rows: list[dict], spec: IntervalSpec, noise: list[dict[str, float]] | None = None) -> dict:
    out: dict = {"rows": len(rows)}
    for metric in ("ttft", "tpot"):
        key = f"{metric}_s"
        errors, misses, inside, beyond2 = [], [], 0, 0
        n = 0
        for r in rows:
            central, measured = r["central"][key], r[f"measured_{key}"]
            samples = [r[f"sample_{i}"] for i in range(spec.num_samples)]
            if noise is not None:
                samples = [apply_noise(s, f) for s, f in zip(samples, noise)]
            values = [s[key] for s in samples]
            if central is None or measured is None or any(v is None for v in values):
                continue
            n += 1
            low, high = spec.bounds(values)
            errors.append(central / measured - 1)
            if low <= measured <= high:
                inside += 1
                continue
            bound = high if measured > high else low
            half = abs(bound - central)
            miss = abs(measured - central) / half if half > 0 else float("inf")
            misses.append(miss)
            beyond2 += miss > 2
        outside = n - inside
        med_err = float(np.median(errors)) if errors else None
        side = sum(1 for r in rows if _outside_on_bias_side(r, key, spec, noise, med_err))
        out[metric] = {"num_rows": n, "inside_pct": _pct(inside, n),
                       "central_bias_median_pct": None if med_err is None else round(100 * med_err, 1),
                       "outside_miss_over_half_width_median": round(float(np.median(misses)), 2) if misses else None,
                       "outside_beyond_2_half_widths_pct_of_outside": _pct(beyond2, outside),
                       "outside_on_the_bias_side_pct_of_outside": _pct(side, outside)}
    return out


def _outside_on_bias_side(r: dict, key: str, spec: IntervalSpec, noise: list[dict[str, float]] | None,
                          bias: float | None) -> bool:
    """The row is outside on the side the subset's central bias points to (measured above when the central values
    are low overall)."""
    if bias is None:
        return False
    samples = [r[f"sample_{i}"] for i in range(spec.num_samples)]
    if noise is not None:
        samples = [apply_noise(s, f) for s, f in zip(samples, noise)]
    values = [s[key] for s in samples]
    if r["central"][key] is None or any(v is None for v in values):
        return False
    low, high = spec.bounds(values)
    measured = r[f"measured_{key}"]
    return measured > high if bias < 0 else measured < low


def _pct(count: int, total: int) -> float | None:
    return round(100 * count / total, 1) if total else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True, help="interval_coverage.py's cache folder of one run")
    parser.add_argument("--level", type=float, default=80.0)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--noise-from", default=None, metavar="PROFILE",
                        help="a profile whose host states served_run_to_run_noise: the what-if coverage with it")
    args = parser.parse_args(argv)
    spec = IntervalSpec(args.level, args.samples, 0, 1)
    rows = load_rows(args.cache)
    noise = None
    if args.noise_from:
        from roofline.cost.hardware import load_profile
        noise = spec.noise(load_profile(args.noise_from))
    report = {"overall": attribute(rows, spec, noise),
              "per_gpu": {s: attribute([r for r in rows if r["system"] == s], spec, noise) for s in SYSTEM_ORDER
                          if any(r["system"] == s for r in rows)}}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
