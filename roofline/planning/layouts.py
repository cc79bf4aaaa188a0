"""What limits each parallel layout of a plan (hardware x TP x DP x EP): the report's explanation of why the answer's
layout wins.

    rows = layout_rows(plan, backend)        # one LayoutRow per layout, the answer's first
    text = explain(rows)                     # one paragraph: the winner and what limits each of the others

Each row takes the layout's best configuration: the GPUs it needs for the target, its rate per GPU, the peak KV use at
its answer, and one decode step at the answer's mean batch per rank split by what takes its time (the attention, the
MoE experts of the busiest rank, the all-to-all, the TP collectives, the host, the other layers:
`roofline.planning.backend.SimulatorBackend.decode_breakdown`). A layout is limited by its KV cache when the answer
filled it (peak use >= KV_FULL), else by the largest part of its decode step; one that serves nothing by its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.errors import UserError
from roofline.planning.plan import ConfigPlan, Plan

KV_FULL = 0.95


@dataclass(frozen=True)
class LayoutRow:
    label: str  # the layout's best configuration
    num_gpus: int | None  # for the target; None: it does not serve
    rate_per_gpu: float | None  # the sustained rate of a replica over its GPUs
    peak_kv_usage: float | None
    decode_s: dict[str, float]  # one decode step by part (empty: not computed)
    num_seqs_per_rank: int
    limited_by: str


def _layout(c: ConfigPlan) -> tuple[str, int, int, int, bool]:
    cfg = c.config
    return (cfg.hardware, cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size,
            cfg.expert_parallel)


def layout_rows(plan: Plan, backend: object) -> tuple[LayoutRow, ...]:
    """One row per layout, as their best configurations rank (the answer's first), then those that do not serve;
    empty when the plan has a single layout per hardware or its backend has no decode breakdown."""
    breakdown = getattr(backend, "decode_breakdown", None)
    layouts = list(dict.fromkeys(_layout(c) for c in plan.configs if c.fit.fits))
    if breakdown is None or len(layouts) <= len(plan.request.hardware):
        return ()
    ranked = plan.ranked()
    rows = []
    for layout in layouts:
        serving = [c for c in ranked if _layout(c) == layout]
        if not serving:
            first = next(c for c in plan.configs if c.fit.fits and _layout(c) == layout)
            why = first.why_not or "misses the SLOs"
            prefill = getattr(backend, "prefill_breakdown", None)
            try:  # what its prefill chunk spends its time on (the TTFT it cannot meet)
                parts = prefill(first.config) if prefill is not None else {}
            except UserError:  # an operator the cost model's per-operator breakdown does not price on this device
                parts = {}
            if parts:
                total = sum(parts.values())
                top = max(parts, key=lambda k: parts[k])
                why += f"; a full prefill chunk takes {total:.3g} s, {parts[top] / total:.0%} of it {top}"
            rows.append(LayoutRow(first.config.label.rsplit(" seqs", 1)[0], None, None, None, {}, 0, why))
            continue
        c = serving[0]
        best = c.best_point
        dp = c.config.data_parallel_size
        per_rank = max(1, round(best.mean_num_running / dp))
        context = round(best.mean_prompt_tokens + best.mean_output_tokens / 2)
        try:
            parts = breakdown(c.config, per_rank, context)
        except UserError:  # (as above)
            parts = {}
        total = sum(parts.values())
        if best.peak_kv_usage >= KV_FULL:
            why = f"KV capacity (peak use {best.peak_kv_usage:.0%} at its answer)"
        elif parts:
            top = max(parts, key=lambda k: parts[k])
            why = f"{top} ({parts[top] / total:.0%} of a decode step)"
        else:
            why = "(its step breakdown is not priced on this device)"
        rate = c.search.max_rate_per_s / c.config.num_gpus
        rows.append(LayoutRow(c.config.label, c.num_gpus, rate, best.peak_kv_usage, parts, per_rank, why))
    order = {c.config.label: i for i, c in enumerate(ranked)}
    return tuple(sorted(rows, key=lambda r: (r.num_gpus is None, order.get(r.label, 0), r.label)))


def explain(rows: tuple[LayoutRow, ...]) -> str:
    """The answer's layout and what limits each other one, in one paragraph."""
    if not rows or rows[0].num_gpus is None:
        return ""
    win = rows[0]
    text = (f"{win.label} serves the target at the lowest cost, with {win.num_gpus} GPUs ({win.rate_per_gpu:.3g} req/s "
            f"per GPU), limited by {win.limited_by}.")
    for r in rows[1:]:
        if r.num_gpus is None:
            text += f" {r.label} does not serve: {r.limited_by}."
        else:
            text += (f" {r.label} needs {r.num_gpus} GPUs ({r.rate_per_gpu:.3g} req/s per GPU), limited by "
                     f"{r.limited_by}.")
    return text
