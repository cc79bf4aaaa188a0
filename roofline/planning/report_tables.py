"""The tables of a capacity-planning report (`roofline plan`): every CSV table and the column subsets the report shows,
each cell formatted once (`roofline.planning.report` renders them; the report and its CSVs cannot disagree)."""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from roofline.planning.backend import DECODE_PARTS
from roofline.planning.plan import (
    ConfigPlan,
    Plan,
    gpus_needed,
)
from roofline.planning.search import Search

# A full search serves hundreds of configurations: the cost plot shows the best MAX_COST_BARS, a report table
# its first MAX_SHOWN_ROWS rows (the CSV tables hold every row).
MAX_COST_BARS = 40
MAX_SHOWN_ROWS = 60


@dataclass(frozen=True)
class Table:
    """A CSV table; `rows` hold the formatted strings that the CSV and the report both show."""

    name: str  # file stem of the CSV
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, name: str) -> list[str]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(self.rows)
        return buf.getvalue()


# ---- formatting: one function per kind of number -------------------------------------------------------

def sig(x: float | None, digits: int = 3) -> str:
    """`digits` significant digits, never in exponent notation; '' for None."""
    if x is None:
        return ""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    decimals = digits - 1 - math.floor(math.log10(abs(x)))
    return f"{round(x, decimals):.{max(0, decimals)}f}"


def usd(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def count(x: int | None) -> str:
    return "" if x is None else str(int(x))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def hardware_slug(hardware: str) -> str:
    """A hardware id, or the file stem of a profile path, for file names."""
    return _slug(Path(hardware).stem if hardware.endswith((".yaml", ".yml")) else hardware)


# ---- tables ------------------------------------------------------------------------------------------

def _pcol(plan: Plan, metric: str) -> str:
    return f"{metric}_p{plan.request.slo.percentile:g}_s"


# The columns that name a configuration, in every table that lists configurations (layouts that differ only in
# PP, DP or EP are different rows of every CSV).
KEY_COLUMNS = ("hardware", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "expert_parallel",
               "quantization", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens")


def _key(c: ConfigPlan) -> tuple[str, ...]:
    cfg = c.config
    tokens = cfg.max_num_batched_tokens or c.fit.max_num_batched_tokens
    return (cfg.hardware, str(cfg.tensor_parallel_size), str(cfg.pipeline_parallel_size), str(cfg.data_parallel_size),
            "yes" if cfg.expert_parallel else "no", cfg.quantization, cfg.kv_cache_dtype, str(cfg.max_num_seqs),
            count(tokens))


def _shown_key(plan: Plan) -> tuple[str, ...]:
    """KEY_COLUMNS as the report shows them: a layout column only where the search space varies it."""
    req = plan.request
    varied = {"pipeline_parallel_size": set(req.pipeline_parallel_sizes) != {1},
              "data_parallel_size": set(req.data_parallel_sizes) != {1},
              "expert_parallel": set(req.expert_parallel) != {False}}
    return tuple(c for c in KEY_COLUMNS if varied.get(c, True))


def shown_key(plan: Plan, c: ConfigPlan) -> tuple[str, ...]:
    """A configuration's key cells as the report's tables show them (the row a report highlights)."""
    cells = dict(zip(KEY_COLUMNS, _key(c)))
    return tuple(cells[name] for name in _shown_key(plan))


def config_columns(plan: Plan) -> tuple[str, ...]:
    columns = [*KEY_COLUMNS, "status", "kv_capacity_tokens", "saturation_rate_per_s", "max_rate_per_replica_per_s",
               _pcol(plan, "ttft"), _pcol(plan, "tpot"), _pcol(plan, "itl"), _pcol(plan, "e2el"),
               "peak_kv_usage_pct", "kv_headroom_pct", "num_replicas", "num_gpus", "sustained_rate_per_s",
               "usd_per_gpu_hour", "usd_per_hour", "usd_per_million_output_tokens", "pareto"]
    if plan.request.sensitivity:
        columns += ["pessimistic_max_rate_per_s", "optimistic_max_rate_per_s", "pessimistic_num_gpus",
                    "optimistic_num_gpus", "pessimistic_usd_per_hour", "optimistic_usd_per_hour",
                    "pessimistic_usd_per_million_output_tokens", "optimistic_usd_per_million_output_tokens"]
    return tuple(columns + ["num_simulations", "reason", "fix"])


def _status(c: ConfigPlan) -> str:
    if not c.fit.fits:
        return "does not fit"
    if c.meets_slo:
        return "serves"
    if c.skipped is not None:
        return "pruned" if c.skipped.startswith("cannot serve") else "misses SLO (bound)"
    return "misses SLO"


def _rate(s: Search | None) -> str:
    return sig(s.max_rate_per_s) if s is not None else ""


def _usd_per_hour(c: ConfigPlan, s: Search | None) -> str:
    n = gpus_needed(c.target_rate_per_s, s)
    return "" if n is None or c.price is None else usd(n * c.price.usd_per_gpu_hour)


def config_row(plan: Plan, c: ConfigPlan, front: list[ConfigPlan]) -> tuple[str, ...]:
    best = c.best_point if c.meets_slo else None
    searches = [s for s in (c.nominal, c.pessimistic, c.optimistic) if s is not None]
    row = [*_key(c), _status(c), count(c.fit.num_kv_tokens), sig(c.nominal.saturation_rate_per_s) if c.nominal else "",
           sig(c.max_rate_per_s) if c.meets_slo else "", sig(best.ttft_s) if best else "",
           sig(best.tpot_s) if best else "", sig(best.itl_s) if best else "", sig(best.e2e_s) if best else "",
           pct(best.peak_kv_usage) if best else "", pct(c.kv_headroom), count(c.num_replicas), count(c.num_gpus),
           sig(c.sustained_rate_per_s), usd(c.price.usd_per_gpu_hour) if c.price else "", usd(c.usd_per_hour),
           usd(c.usd_per_million_output_tokens), "yes" if c in front else ""]
    if plan.request.sensitivity:
        gpus = c.gpus_range() or (None, None)
        per_million = c.usd_per_million_range() or (None, None)
        row += [_rate(c.pessimistic), _rate(c.optimistic), count(gpus[1]), count(gpus[0]),
                _usd_per_hour(c, c.pessimistic), _usd_per_hour(c, c.optimistic), usd(per_million[1]),
                usd(per_million[0])]
    row += [str(sum(len(s.points) for s in searches)), c.why_not or "", c.fit.fix or ""]
    return tuple(row)


def configurations_table(plan: Plan, configs: list[ConfigPlan], name: str) -> Table:
    front = plan.pareto_front()
    return Table(name, config_columns(plan), tuple(config_row(plan, c, front) for c in configs))


def probes_table(plan: Plan) -> Table:
    columns = (*KEY_COLUMNS, "efficiency", "probe", "rate_per_s", _pcol(plan, "ttft"), _pcol(plan, "tpot"),
               _pcol(plan, "itl"), _pcol(plan, "e2el"), "throughput_per_s", "passes", "complete")
    rows = []
    for c in plan.configs:
        runs = [(s.efficiency.label, s.points) for s in (c.nominal, c.pessimistic, c.optimistic) if s is not None]
        if c.config in plan.load_curves:
            runs.append(("nominal, load curve", plan.load_curves[c.config]))
        for label, points in runs:
            for i, p in enumerate(points):
                rows.append((*_key(c), label, str(i), "inf" if math.isinf(p.rate_per_s) else sig(p.rate_per_s),
                             sig(p.ttft_s), sig(p.tpot_s), sig(p.itl_s), sig(p.e2e_s), sig(p.throughput_per_s),
                             "yes" if p.passes else "no", "yes" if p.complete else "no"))
    return Table("search_probes", columns, tuple(rows))


def step_ops_table(plan: Plan) -> Table:
    columns = ("hardware", "configuration", "step", "op", "flops", "bytes", "flop_per_byte", "time_s", "bound")
    rows = []
    for c in plan.best_per_hardware():
        for step in plan.profiles[c.config.hardware]:
            for op in step.ops:
                intensity = op.flops / op.bytes if op.bytes > 0 else None
                rows.append((c.config.hardware, c.config.label, step.label, op.name,
                             sig(op.flops), sig(op.bytes), sig(intensity), sig(op.time_s), op.bound))
    return Table("step_ops", columns, tuple(rows))


NO_PRICE_OFFER = "no shipped price: ranked by GPUs, after the priced hardware; --price ID=USD_PER_GPU_HOUR adds one"


def prices_table(plan: Plan) -> Table:
    rows = []
    for hw in plan.request.hardware:
        price = next(c.price for c in plan.configs if c.config.hardware == hw)
        rows.append((hw, usd(price.usd_per_gpu_hour), price.offer, price.source, price.read_on) if price
                    else (hw, "", NO_PRICE_OFFER, "", ""))
    return Table("prices", ("hardware", "usd_per_gpu_hour", "offer", "source", "read_on"), tuple(rows))


LAYOUT_COLUMNS = ("configuration", "num_gpus", "rate_per_gpu_per_s", "peak_kv_usage_pct", "seqs_per_rank",
                  "decode_step_ms", *(f"{part.replace(' ', '_').replace('-', '_')}_pct" for part in DECODE_PARTS),
                  "limited_by")


def layouts_table(plan: Plan) -> Table:
    """What limits each parallel layout (`roofline.planning.layouts`): its best configuration, GPUs for the target,
    and one decode step at its answer's batch split by part."""
    rows = []
    for r in plan.layouts:
        total = sum(r.decode_s.values())
        shares = [pct(r.decode_s[p] / total) if total > 0 else "" for p in DECODE_PARTS]
        rows.append((r.label, count(r.num_gpus), sig(r.rate_per_gpu), pct(r.peak_kv_usage),
                     count(r.num_seqs_per_rank) if r.decode_s else "", sig(total * 1e3) if total > 0 else "",
                     *shares, r.limited_by))
    return Table("layouts", LAYOUT_COLUMNS, tuple(rows))


def all_tables(plan: Plan) -> dict[str, Table]:
    tables = [
        configurations_table(plan, list(plan.configs), "configurations"),
        configurations_table(plan, plan.best_per_hardware(), "best_per_hardware"),
        configurations_table(plan, plan.ranked(), "serving"),
        configurations_table(plan, plan.pareto_front(), "pareto_front"),
        probes_table(plan),
        step_ops_table(plan),
        prices_table(plan),
    ]
    if plan.layouts:
        tables.append(layouts_table(plan))
    return {t.name: t for t in tables}


# ---- what the report shows of each table --------------------------------------------------------------

def column_titles(plan: Plan) -> dict[str, str]:
    """CSV column -> its heading in the report."""
    p = f"p{plan.request.slo.percentile:g}"
    return {
        "hardware": "hardware", "tensor_parallel_size": "TP", "pipeline_parallel_size": "PP",
        "data_parallel_size": "DP", "expert_parallel": "EP", "quantization": "quant.",
        "kv_cache_dtype": "KV dtype", "max_num_seqs": "max seqs", "max_num_batched_tokens": "max batched tokens",
        "status": "status", "kv_capacity_tokens": "KV capacity [tokens]", "saturation_rate_per_s": "saturation [req/s]",
        "max_rate_per_replica_per_s": "max rate per replica [req/s]", _pcol(plan, "ttft"): f"TTFT {p} [s]",
        _pcol(plan, "tpot"): f"TPOT {p} [s]", _pcol(plan, "itl"): f"ITL {p} [s]",
        _pcol(plan, "e2el"): f"E2E {p} [s]", "peak_kv_usage_pct": "peak KV use [%]",
        "kv_headroom_pct": "KV headroom [%]", "num_replicas": "replicas", "num_gpus": "GPUs",
        "sustained_rate_per_s": "deployment sustains [req/s]",
        "usd_per_gpu_hour": "USD per GPU-hour", "usd_per_hour": "USD per hour",
        "usd_per_million_output_tokens": "USD per M output tokens", "pareto": "Pareto",
        "pessimistic_max_rate_per_s": "max rate, pessimistic", "optimistic_max_rate_per_s": "max rate, optimistic",
        "pessimistic_num_gpus": "GPUs, pessimistic", "optimistic_num_gpus": "GPUs, optimistic",
        "pessimistic_usd_per_hour": "USD/h, pessimistic", "optimistic_usd_per_hour": "USD/h, optimistic",
        "pessimistic_usd_per_million_output_tokens": "USD per M tokens, pessimistic",
        "optimistic_usd_per_million_output_tokens": "USD per M tokens, optimistic",
        "num_simulations": "simulations", "reason": "reason", "fix": "would fit with", "offer": "offer",
        "source": "source", "read_on": "read on",
    }


def shown_columns(plan: Plan, table: str) -> tuple[str, ...]:
    """The columns of a CSV table that the report shows (all rows, these columns)."""
    if table == "prices":
        return ("hardware", "usd_per_gpu_hour", "offer", "source", "read_on")
    if table == "not_serving":
        return (*_shown_key(plan), "status", "reason", "fix")
    if table == "pareto_front":
        return (*_shown_key(plan), "num_gpus", "sustained_rate_per_s", "usd_per_hour", "usd_per_million_output_tokens")
    slos = [_pcol(plan, name) for name in plan.request.slo.limits()]
    shown = [*_shown_key(plan), "max_rate_per_replica_per_s", *slos, "kv_headroom_pct", "num_replicas", "num_gpus",
             "usd_per_hour", "usd_per_million_output_tokens"]
    if plan.request.sensitivity:
        shown += ["optimistic_num_gpus", "pessimistic_num_gpus", "optimistic_usd_per_million_output_tokens",
                  "pessimistic_usd_per_million_output_tokens"]
    return tuple(shown)


def _subtable(table: Table, columns: tuple[str, ...], keep: list[bool] | None = None) -> Table:
    """The columns, and the first MAX_SHOWN_ROWS rows kept (the CSV has them all)."""
    idx = [table.columns.index(c) for c in columns]
    rows = [r for i, r in enumerate(table.rows) if keep is None or keep[i]]
    return Table(table.name, columns, tuple(tuple(r[i] for i in idx) for r in rows[:MAX_SHOWN_ROWS]))


def report_tables(plan: Plan, tables: dict[str, Table]) -> dict[str, Table]:
    """The tables as the report shows them, each a column subset of a CSV table."""
    configs = tables["configurations"]
    not_serving = [s != "serves" for s in configs.column("status")]
    return {
        "best_per_hardware": _subtable(tables["best_per_hardware"], shown_columns(plan, "best_per_hardware")),
        "pareto_front": _subtable(tables["pareto_front"], shown_columns(plan, "pareto_front")),
        "serving": _subtable(tables["serving"], shown_columns(plan, "serving")),
        "not_serving": _subtable(configs, shown_columns(plan, "not_serving"), not_serving),
        "prices": _subtable(tables["prices"], shown_columns(plan, "prices")),
        **({"layouts": tables["layouts"]} if "layouts" in tables else {}),
    }
