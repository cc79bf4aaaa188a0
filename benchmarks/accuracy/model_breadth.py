"""Model breadth (issue 39): the presets' parameter counts against the published ones, and which vLLM rows of the
end-to-end judge are skipped because their architecture or precision is not modelled.

    python benchmarks/accuracy/model_breadth.py [--json]

Part 1 reads benchmarks/data/published_param_counts.yaml (the publisher's figure and its source per preset) and
prints each preset's count (`ModelSpec.num_params` / `num_active_params`) next to it, with the relative error.
Part 2 classifies every vLLM `agg` row of aiconfigurator-core 0.12.0's silicon_sample.csv exactly as
benchmarks/accuracy/e2e_accuracy.py does before it simulates anything (`roofline.judge.rows.resolve_row`: the
closed list of skip reasons, first reason counted) and prints the counts per reason, and per model for the two
reasons this issue is about ("model architecture not modelled", "precision not modelled"). It runs no simulation
(seconds); nothing is fitted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from roofline.judge.rows import RowError, Skip, SkipReason, read_silicon_rows, resolve_row  # noqa: E402
from roofline.registry import load_model  # noqa: E402

PUBLISHED = ROOT / "benchmarks" / "data" / "published_param_counts.yaml"


def param_rows() -> list[dict[str, Any]]:
    """One row per published figure: preset, figure, published and counted (billions), relative error."""
    rows = []
    for entry in yaml.safe_load(PUBLISHED.read_text())["models"]:
        spec = load_model(entry["model"])
        embedding = spec.vocab_size * spec.hidden_size / 1e9
        total = spec.num_params() / 1e9
        head = 0.0 if spec.tie_word_embeddings else embedding
        counted = {"total_b": total, "embedding_b": embedding, "non_embedding_b": total - embedding,
                   "active_b": spec.num_active_params() / 1e9 - ((embedding + head) if "active_counts" in entry
                                                                 else 0.0)}
        for figure in ("total_b", "active_b", "embedding_b", "non_embedding_b"):
            if figure in entry:
                rows.append({"model": entry["model"], "figure": figure.removesuffix("_b"),
                             "published_b": entry[figure], "counted_b": round(counted[figure], 3),
                             "error_pct": round(100 * (counted[figure] / entry[figure] - 1), 2),
                             "note": entry.get("total_note", "") if figure == "total_b" else
                             entry.get("active_counts", "") if figure == "active_b" else ""})
    return rows


def skip_counts() -> dict[str, Any]:
    """The judge's classification of every vLLM agg row (no simulation)."""
    first: Counter[str] = Counter()
    by_model: Counter[tuple[str, str, str]] = Counter()
    for row in read_silicon_rows():
        try:
            case = resolve_row(row)
        except RowError:
            first["miss (row error)"] += 1
            continue
        if isinstance(case, Skip):
            first[case.reasons[0].value] += 1
            for reason, detail in zip(case.reasons, case.details):
                if reason in (SkipReason.ARCHITECTURE, SkipReason.PRECISION):
                    by_model[(reason.value, row.model_path, detail)] += 1
        else:
            first["simulated"] += 1
    return {"first_reason": dict(sorted(first.items())),
            "architecture_or_precision": [{"reason": r, "model": m, "detail": d, "rows": n}
                                          for (r, m, d), n in sorted(by_model.items())]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    params, skips = param_rows(), skip_counts()
    if args.json:
        print(json.dumps({"param_counts": params, "judge_skips": skips}, indent=2))
        return 0
    print("| preset | figure | published (B) | counted (B) | error | note |\n|---|---|---|---|---|---|")
    for r in params:
        print(f"| {r['model']} | {r['figure']} | {r['published_b']:g} | {r['counted_b']:g} | {r['error_pct']:+.2f} % "
              f"| {r['note']} |")
    text_only = [r for r in params if not r["note"].startswith("the total includes")]
    errors = sorted(abs(r["error_pct"]) for r in text_only)
    coarse = [r["model"] + " " + r["figure"] for r in text_only if abs(r["error_pct"]) > 1]
    print(f"\n{len(text_only)} figures of the text model (the {len(params) - len(text_only)} totals that include a "
          f"vision encoder apart): |error| median {errors[len(errors) // 2]:.2f} %, max {errors[-1]:.2f} %; above 1 % "
          f"(each within half a unit of its published figure's last digit): {', '.join(coarse) or 'none'}")
    print("\n| judge rows (first reason) | count |\n|---|---|")
    for reason, n in skips["first_reason"].items():
        print(f"| {reason} | {n} |")
    for r in skips["architecture_or_precision"]:
        print(f"- {r['reason']}: {r['model']} ({r['detail']}): {r['rows']} rows")
    if not skips["architecture_or_precision"]:
        print("- no row is skipped for 'model architecture not modelled' or 'precision not modelled'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
