"""The capacity-planning report of `roofline plan`: report.md, report.html, PNG plots and CSV tables.

    write_report(plan, out_dir)     # -> the files written, all under out_dir

Every number shown in report.md/report.html is the very string written to a CSV beside it (one formatting
per column, applied once), so the report and its tables cannot disagree. No dates or host names go in:
the same plan gives byte-identical files.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import numpy as np

from roofline import __version__
from roofline.cost.hardware import load_profile
from roofline.errors import UserError
from roofline.planning.bounds import RATE_MARGIN
from roofline.planning.layouts import explain
from roofline.planning.plan import (
    LOAD_CURVE_FRACTIONS,
    LOAD_CURVE_REQUEST_FRACTION,
    ConfigPlan,
    Plan,
    sensitivity_band,
)
from roofline.planning.prune import JUMP_FRACTION, REFINE_REL_TOL, ROUND_SIZE
from roofline.planning.report_tables import (  # noqa: F401 - MAX_SHOWN_ROWS, Table, sig: this module's API too
    MAX_COST_BARS,
    MAX_SHOWN_ROWS,
    Table,
    all_tables,
    column_titles,
    hardware_slug,
    report_tables,
    shown_key,
    sig,
    usd,
)
from roofline.planning.search import (
    DRAIN_FRACTION,
    WARMUP_FRACTION,
    Config,
    Point,
    num_simulated_requests,
)

# ---- figures -----------------------------------------------------------------------------------------

# The metrics of the latency-against-load plot: (SLO name in `Slo.limits`, Point field, title).
CURVE_METRICS = (("ttft", "ttft_s", "TTFT"), ("tpot", "tpot_s", "TPOT"), ("itl", "itl_s", "ITL"),
                 ("e2el", "e2e_s", "end-to-end latency"))


def _curve_arrays(points: tuple[Point, ...] | list[Point]) -> tuple[np.ndarray, ...]:
    """(rates, then one array per CURVE_METRICS metric) over the whole probes at finite rates, by rate; NaN where a
    metric was not measured. A probe stopped once it missed an SLO (`Point.complete` False) has only lower bounds."""
    kept = sorted((p for p in points if math.isfinite(p.rate_per_s) and p.complete), key=lambda p: p.rate_per_s)
    columns = [np.array([p.rate_per_s for p in kept])]
    for _, attr, _ in CURVE_METRICS:
        columns.append(np.array([math.nan if getattr(p, attr) is None else getattr(p, attr) for p in kept]))
    return tuple(columns)


def _saturation_of(plan: Plan, c: ConfigPlan) -> float | None:
    """The highest steady throughput any probe of the configuration measured (its saturation rate)."""
    points = list(c.search.points) + list(plan.load_curves.get(c.config, ()))
    return max((p.throughput_per_s for p in points), default=None)


def write_figures(plan: Plan, out_dir: Path) -> list[tuple[str, str]]:
    """The plots; returns (file name, caption) in report order."""
    from roofline.planning import plots as plan_plots  # (matplotlib: imported when figures are drawn)

    figures: list[tuple[str, str]] = []
    best = plan.best
    bars = []
    for c in plan.ranked():
        if c.price is None:
            continue
        low = high = None
        span = c.gpus_range()
        if span is not None:
            a, b = span
            low = None if a is None else a * c.price.usd_per_gpu_hour
            high = None if b is None else b * c.price.usd_per_gpu_hour
        bars.append(plan_plots.CostBar(c.config.label, c.cost_and_rate()[0], low, high, c is best))
    if bars:
        plan_plots.cost_by_config(out_dir / "cost.png", bars[:MAX_COST_BARS])
        shown = f"the {MAX_COST_BARS} cheapest of {len(bars)}" if len(bars) > MAX_COST_BARS else "all"
        figures.append(("cost.png", f"Dollars per hour to serve the target rate ({shown} serving configurations "
                        "with a price), best first (cheapest; then fewest GPUs; then the most headroom at the target "
                        "load). Whiskers: optimistic (left) and pessimistic (right), as the Method says."))
    front = plan.pareto_front()
    if front:
        points = [plan_plots.ParetoPoint(c.config.label, *c.cost_and_rate(), c in front, c is plan.cheapest)
                  for c in plan.ranked() if c.price is not None]
        plan_plots.pareto(out_dir / "pareto.png", points, plan.request.target_rate_per_s)
        figures.append(("pareto.png", "Cost of the deployment for the target rate against the highest rate that "
                        "deployment sustains within all SLOs (replicas x rate per replica), every serving "
                        "configuration with a price. Line: the Pareto front (no configuration is both cheaper and "
                        "sustains more); star: the cheapest; dashed: the target rate."))
    chosen = plan.best_per_hardware()
    if chosen:
        curves = [plan_plots.Curve(
            c.config.label, _curve_arrays(list(c.search.points) + list(plan.load_curves.get(c.config, ()))),
            c.search.max_rate_per_s, _curve_arrays(c.pessimistic.points) if c.pessimistic else None,
            _curve_arrays(c.optimistic.points) if c.optimistic else None,
            c.pessimistic.max_rate_per_s if c.pessimistic else None,
            c.optimistic.max_rate_per_s if c.optimistic else None, _saturation_of(plan, c)) for c in chosen]
        plan_plots.latency_vs_load(out_dir / "latency_vs_load.png", curves, plan.request.slo,
                                   [(name, title) for name, _, title in CURVE_METRICS])
        figures.append(("latency_vs_load.png", "Latency percentiles of one replica against offered load, from light "
                        "load to past saturation, for the best configuration of each hardware: every simulation of "
                        "its search and of its load curve that ran to its end (not those stopped once they missed an "
                        "SLO) (dashed: the pessimistic and optimistic searches). "
                        "Red: the SLO; dotted: the highest rate within all SLOs; grey: the saturation rate; shaded: "
                        "the highest rate's range from pessimistic to optimistic (the Method says what they are)."))
        plan_plots.kv_usage(out_dir / "kv_usage.png",
                            [(c.config.label, c.search.kv_time_s, c.search.kv_usage) for c in chosen])
        figures.append(("kv_usage.png", "KV-cache usage over simulated time at the highest rate within the SLOs "
                        "(binned maxima)."))
        plan_plots.step_breakdown(out_dir / "step_breakdown.png",
                                  [(c.config.label, *plan.profiles[c.config.hardware]) for c in chosen])
        figures.append(("step_breakdown.png", "Predicted time of a representative prefill step and decode step, "
                        "by operator (per rank under tensor parallelism)."))
        for c in chosen:
            name = f"roofline_{hardware_slug(c.config.hardware)}.png"
            plan_plots.roofline_chart(out_dir / name, c.config.label, *plan.profiles[c.config.hardware])
            figures.append((name, f"Roofline of {c.config.hardware} with the operators of the prefill (circles) and "
                            f"decode (triangles) steps above, at the FLOP/s the cost model predicts for them."))
    return figures


# ---- text --------------------------------------------------------------------------------------------


def _layout_words(cfg: Config) -> str:
    """The pipeline / data / expert parallelism of a replica, in words ('' for TP alone)."""
    words = ([f"pipeline-parallel size {cfg.pipeline_parallel_size}"] if cfg.pipeline_parallel_size > 1 else []) + \
        ([f"data-parallel size {cfg.data_parallel_size}"] if cfg.data_parallel_size > 1 else []) + \
        (["expert parallelism"] if cfg.expert_parallel else [])
    return "".join(f", {w}" for w in words)

def answer_text(plan: Plan, tables: dict[str, Table]) -> str:
    """The answer in one paragraph, its numbers taken from the best configuration's CSV row."""
    req = plan.request
    best = plan.best
    if best is None:
        return (f"No configuration serves {sig(req.target_rate_per_s)} req/s within the SLOs: see the "
                f"configurations that cannot serve, and why.")
    row = dict(zip(tables["configurations"].columns,
                   tables["configurations"].rows[list(plan.configs).index(best)]))
    cfg = best.config
    weights = (cfg.quantization + " weights" if cfg.quantization != "none" else
               f"the checkpoint's {req.checkpoint_quantization} weights" if req.checkpoint_quantization else
               "unquantized")
    storage = (f"{weights}, "
               f"{'KV cache in the activation dtype' if cfg.kv_cache_dtype == 'auto' else cfg.kv_cache_dtype + ' KV cache'}")
    cost = (f"for {row['usd_per_hour']} USD/hour ({row['usd_per_million_output_tokens']} USD per million output "
            f"tokens)" if best.price is not None else
            f"({cfg.hardware} has no price: ranked by GPUs; --price {cfg.hardware}=USD_PER_GPU_HOUR prices it)")
    text = (f"Serve {sig(req.target_rate_per_s)} requests/s of {req.workload} with {req.model} on "
            f"{row['num_gpus']} x {cfg.hardware}: {row['num_replicas']} replica(s) of tensor-parallel size "
            f"{row['tensor_parallel_size']}{_layout_words(cfg)} ({storage}) with max_num_seqs {row['max_num_seqs']} and "
            f"max_num_batched_tokens {row['max_num_batched_tokens']}, each sustaining "
            f"{row['max_rate_per_replica_per_s']} req/s within the SLOs, {cost}.")
    if req.sensitivity and best.price is not None:
        measured = "90th (pessimistic)" in sensitivity_band([cfg.hardware])
        text += ((" With every operator kind as slow as the 90th percentile of its measured / predicted (90 % "
                  "confidence if the kinds' errors move together, more if independent; operator times only, not the "
                  "host's or API server's) it needs "
                  if measured else " With compute and memory efficiency 10 % lower it needs ")
                 + f"{row['pessimistic_num_gpus'] or 'more'} GPUs ({row['pessimistic_usd_per_hour'] or '?'} USD/hour, "
                 f"{row['pessimistic_usd_per_million_output_tokens'] or '?'} USD per million output tokens); "
                 + ("at the 10th percentile " if measured else "10 % higher ")
                 + f"{row['optimistic_num_gpus']} GPUs ({row['optimistic_usd_per_hour']} USD/hour, "
                 f"{row['optimistic_usd_per_million_output_tokens']} USD per million output tokens).")
    return text


def _values(values: tuple[object, ...]) -> str:
    return ", ".join("vLLM's default" if v is None else str(v) for v in values)


def setup_lines(plan: Plan) -> list[str]:
    req = plan.request
    slo = req.slo
    p = f"p{slo.percentile:g}"
    limits = " and ".join(f"{p} {name.upper() if name != 'e2el' else 'end-to-end'} <= {value:g} s"
                          for name, value in slo.limits().items())
    pruned = len(plan.pruned)
    lines = [
        f"model: {req.model}; workload: {req.workload}; target: {sig(req.target_rate_per_s)} requests/s",
        f"SLOs: {limits} (vLLM's --goodput names: {', '.join(slo.limits())})",
        f"search space: hardware {', '.join(req.hardware)}; tensor-parallel sizes {_values(req.tensor_parallel_sizes)}; "
        f"quantization {_values(req.quantizations)}; KV-cache dtype {_values(req.kv_cache_dtypes)}; "
        f"max_num_batched_tokens {_values(req.max_num_batched_tokens)}; max_num_seqs {_values(req.max_num_seqs)}",
        f"{len(plan.configs)} configurations: {pruned} cannot fit, {len(plan.skipped)} pruned by the cost model's "
        f"bounds or by cost (an SLO missed at any rate, or more GPUs than their hardware's best), "
        f"{len(plan.configs) - pruned - len(plan.skipped)} searched, {len(plan.serving)} serve the target; "
        f"{plan.num_simulations} simulations of {num_simulated_requests(req.num_requests)} requests each",
    ]
    cheapest = plan.cheapest
    if cheapest is not None:
        lines.append(f"cheapest: {cheapest.config.label}, {usd(cheapest.usd_per_hour)} USD/hour; Pareto front of "
                     f"cost against sustained rate: {len(plan.pareto_front())} configuration(s)")
    for hw in plan.unpriced_hardware:
        lines.append(f"{hw} has no shipped price: its configurations are ranked by GPUs, after those with a price; "
                     f"--price {hw}=USD_PER_GPU_HOUR adds one")
    for hw in req.hardware:  # where each profile's parameters come from, and their measured error
        try:
            lines.append("hardware profile " + load_profile(hw).provenance_line())
        except UserError:  # a backend of its own (the tests' fake devices) plans hardware without a profile
            continue
    return lines + list(plan.notes)


def method_lines(plan: Plan) -> list[str]:
    req = plan.request
    lines = [
        "Pruning, before any simulation: every configuration's deployment is built as vLLM would size it (TP must "
        "divide the model's heads and stay within one scale-up domain; weights, activation peak and one "
        "max_model_len request's KV cache must fit the memory vLLM may use). One that cannot fit is rejected with "
        "the reason, and with each single change that was checked to make it fit (a larger TP, an fp8 KV cache, "
        "weight quantization, a shorter max_model_len).",
        "Each configuration is one replica simulated by the discrete-event simulator (the engine's own scheduler, "
        "step times from the roofline cost model). A probe simulates "
        f"{num_simulated_requests(req.num_requests)} requests and measures {req.num_requests}: the first "
        f"{WARMUP_FRACTION:.0%} and the last {DRAIN_FRACTION:.0%} by arrival are warm-up and drain. A probe passes "
        f"when the p{req.slo.percentile:g} of every SLO metric is within its limit (ITL: over the pooled "
        "inter-token gaps of the measured requests)." + (
            " A probe ends as soon as it certainly misses an SLO (roofline/planning/early_stop.py: the SLO percentile "
            "of what every request has waited so far is over the limit, so the whole run would miss it too); its "
            "percentiles are then lower bounds (search_probes.csv: complete = no) and it is left out of the "
            "latency-against-load plot." if req.prune else ""),
        "Bounds, before any simulation (roofline/planning/bounds.py): from the cost model's step times and the "
        "probes' requests, the highest rate one replica could sustain (its decode steps, its KV capacity and its "
        f"GEMM compute, raised {RATE_MARGIN:.0%} for a finite run) and the lowest SLO percentiles its requests could "
        "see. A configuration whose latency bound already misses an SLO is not simulated; the rate bound gives the "
        "fewest replicas worth probing.",
        "Search (roofline/planning/prune.py): per configuration, the fewest replicas k whose probe at target / k "
        "meets the SLOs; from the bound's k, then after an overloaded failing probe towards "
        f"{JUMP_FRACTION:g} x the rate it served, then bisection between the largest failing and the smallest "
        "passing k. Branch and bound per hardware: once a configuration serves with G GPUs, no other configuration "
        "of that hardware probes a k that needs more than G GPUs, and one whose bound already needs more is not "
        "simulated (\"pruned\": its hardware's best is known without it); equal cost and GPUs rank by more "
        "max_num_seqs, then by the worst SLO percentile over its limit at the target load. The configurations equal "
        "but for max_num_seqs start from the answer of the one with the most. The best configuration then has its "
        "rate refined "
        "between target / k and target / (k - 1) to "
        f"within {REFINE_REL_TOL:.0%} (geometric bisection); the others' "
        "max rate per replica is target / k, the rate they were shown to pass. Probes run in rounds of "
        f"{ROUND_SIZE}, the cheapest pending first. It assumes latency percentiles never fall as load rises; every "
        "probe replays the same seeded requests with arrival gaps scaled, which keeps the measured curve "
        "monotone. The latency-against-load plot adds probes to the best configuration's at "
        f"{' and '.join(f'{f:g}' for f in LOAD_CURVE_FRACTIONS)} x its highest rate within the SLOs (measuring "
        f"{LOAD_CURVE_REQUEST_FRACTION:.0%} of the requests: light load needs few).",
        "Replicas = the fewest that pass (= ceil(target rate / max rate per replica)); GPUs = replicas x TP; "
        "USD/hour = GPUs x price; "
        "USD per million output tokens = USD/hour / (target rate x mean output tokens x 3600) x 1e6. The "
        "deployment sustains replicas x max rate per replica within the SLOs; the Pareto front holds the "
        "configurations that no other beats on both USD/hour and that rate.",
        "KV headroom = 1 - the peak fraction of KV blocks in use at the highest rate within the SLOs.",
    ]
    if req.sensitivity:
        lines.append(f"Sensitivity: the replicas of the best configuration, pessimistic and optimistic "
                     f"({sensitivity_band(req.hardware)}), searched from the nominal answer.")
    lines.append(f"roofline {__version__}.")
    return lines


def _md_table(table: Table, titles: dict[str, str]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(titles.get(c, c) for c in table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _truncated(plan: Plan, key: str, shown: dict[str, Table]) -> str:
    """A note when a report table shows fewer rows than its CSV."""
    total = {"serving": len(plan.serving), "not_serving": len(plan.configs) - len(plan.serving)}.get(key, 0)
    csv_name = "serving.csv" if key == "serving" else "configurations.csv"
    if total <= len(shown[key].rows):
        return ""
    return f"The first {len(shown[key].rows)} of {total} rows; all of them in {csv_name}."


LAYOUTS_TITLE = "What limits each parallel layout"
SECTIONS = (("Best configuration per hardware", "best_per_hardware"),
            ("Cheapest configuration and the Pareto front of cost against sustained rate", "pareto_front"),
            ("All configurations that serve the target", "serving"),
            ("Configurations that cannot serve or cannot beat their hardware's best (pruned before or during the "
             "search, or missing an SLO)", "not_serving"))


def render_markdown(plan: Plan, shown: dict[str, Table], answer: str, figures: list[tuple[str, str]],
                    deploy: tuple[str, ...] = ()) -> str:
    titles = column_titles(plan)
    parts = [f"# Capacity plan: {plan.request.model} on {', '.join(plan.request.hardware)}", "",
             "## Answer", "", answer, "", *[f"- {line}" for line in setup_lines(plan)], ""]
    if deploy:
        parts += ["## Deploy", "", "The best configuration of each hardware, as `vllm serve` runs it:", "", "```",
                  *deploy, "```", ""]
    if "layouts" in shown:
        parts += [f"## {LAYOUTS_TITLE}", "", explain(plan.layouts), "", _md_table(shown["layouts"], titles), ""]
    for title, key in SECTIONS + (("Prices", "prices"),):
        parts += [f"## {title}", "", _md_table(shown[key], titles) if shown[key].rows else "(none)", ""]
        if _truncated(plan, key, shown):
            parts += [_truncated(plan, key, shown), ""]
    parts += ["## Plots", ""]
    for name, caption in figures:
        parts += [f"![{caption}]({name})", "", caption, ""]
    parts += ["## Method", "", *[f"- {line}" for line in method_lines(plan)], "",
              "Tables: configurations.csv (every configuration), best_per_hardware.csv, serving.csv, pareto_front.csv, "
              "search_probes.csv (every simulation), step_ops.csv (the operators in the roofline plots), prices.csv.",
              ""]
    return "\n".join(parts)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px auto; max-width: 1280px;
       color: #222; line-height: 1.4; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.answer { background: #eef7ee; border-left: 6px solid #2e7d32; padding: 12px 16px; font-size: 1.1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
td.text { text-align: left; }
tr.best td { background: #eef7ee; font-weight: bold; }
figure { margin: 12px 0 24px 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
ul { padding-left: 20px; } .muted { color: #666; font-size: 0.85em; }
pre { white-space: pre-wrap; word-break: break-all; background: #f7f7f7; padding: 8px; font-size: 0.85em; }
"""


def _html_table(table: Table, titles: dict[str, str], best_row: tuple[str, ...] | None = None) -> str:
    if not table.rows:
        return "<p class=\"muted\">(none)</p>"
    head = "".join(f"<th>{html.escape(titles.get(c, c))}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        cls = " class=\"best\"" if best_row is not None and row[:len(best_row)] == best_row else ""
        cells = "".join(f"<td>{html.escape(v)}</td>" if _is_number(v) else f"<td class=\"text\">{html.escape(v)}</td>"
                        for v in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == ""
    return True


def render_html(plan: Plan, shown: dict[str, Table], answer: str, figures: list[tuple[str, str]],
                out_dir: Path, deploy: tuple[str, ...] = ()) -> str:
    """One self-contained page: the plots are embedded (data URIs), so the file can be mailed on its own."""
    titles = column_titles(plan)
    best = plan.best
    best_key = None if best is None else shown_key(plan, best)
    title = f"Capacity plan: {plan.request.model} on {', '.join(plan.request.hardware)}"
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", f"<p class=\"answer\">{html.escape(answer)}</p>",
             "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in setup_lines(plan)) + "</ul>"]
    figure_html = {name: (f"<figure><img src=\"{_data_uri(out_dir / name)}\" alt=\"{html.escape(caption)}\">"
                          f"<figcaption>{html.escape(caption)}</figcaption></figure>") for name, caption in figures}
    if deploy:
        parts += ["<h2>Deploy</h2>", "<p>The best configuration of each hardware, as <code>vllm serve</code> runs "
                  "it:</p>", "<pre>" + "\n".join(html.escape(line) for line in deploy) + "</pre>"]
    if "layouts" in shown:
        parts += [f"<h2>{LAYOUTS_TITLE}</h2>", f"<p>{html.escape(explain(plan.layouts))}</p>",
                  _html_table(shown["layouts"], titles)]
    parts += [figure_html[n] for n in ("cost.png",) if n in figure_html]
    for heading, key in SECTIONS:
        parts += [f"<h2>{heading}</h2>", _html_table(shown[key], titles, best_key)]
        if _truncated(plan, key, shown):
            parts.append(f"<p class=\"muted\">{html.escape(_truncated(plan, key, shown))}</p>")
        if key == "pareto_front":
            parts += [figure_html[n] for n in ("pareto.png",) if n in figure_html]
    parts.append("<h2>Plots</h2>")
    parts += [figure_html[n] for n, _ in figures if n not in ("cost.png", "pareto.png")]
    parts += ["<h2>Prices</h2>", _html_table(shown["prices"], titles), "<h2>Method</h2>",
              "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in method_lines(plan)) + "</ul>",
              "<p class=\"muted\">Tables (CSV files beside this report): " + ", ".join(
                  f"<a href=\"{n}.csv\">{n}.csv</a>" for n in ("configurations", "best_per_hardware", "serving",
                                                              "pareto_front", "search_probes", "step_ops",
                                                              "prices")) + "</p>",
              "</body></html>", ""]
    return "\n".join(parts)


def _data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def write_report(plan: Plan, out_dir: Path, deploy: tuple[str, ...] = ()) -> list[Path]:
    """report.md, report.html, the PNG plots and the CSV tables under `out_dir`; returns their paths. `deploy`:
    command lines shown in a "Deploy" section."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = all_tables(plan)
    written = []
    for table in tables.values():
        path = out_dir / f"{table.name}.csv"
        path.write_text(table.to_csv())
        written.append(path)
    figures = write_figures(plan, out_dir)
    written += [out_dir / name for name, _ in figures]
    shown = report_tables(plan, tables)
    answer = answer_text(plan, tables)
    for name, text in (("report.md", render_markdown(plan, shown, answer, figures, deploy)),
                       ("report.html", render_html(plan, shown, answer, figures, out_dir, deploy))):
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    return written
