"""roofline.planning.plan / roofline.planning.report: the rate search, the replica and cost arithmetic, prices, and the report
files, against a small fake backend whose capacity is known in closed form."""

from __future__ import annotations

import base64
import csv
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from roofline.errors import UserError
from roofline.planning import backend
from roofline.planning import plan as planner
from roofline.planning import prices as pricing
from roofline.planning import search as searching
from roofline.planning.bounds import Bounds
from roofline.planning.plan import PlanRequest
from roofline.planning.prices import Price
from roofline.planning.report import MAX_SHOWN_ROWS, Table, all_tables, report_tables, sig, write_report
from roofline.planning.search import (
    NOMINAL,
    OPTIMISTIC,
    PESSIMISTIC,
    RATE_REL_TOL,
    Config,
    Efficiency,
    Fit,
    OpSummary,
    RunResult,
    Search,
    Slo,
    StepProfile,
)


@dataclass(frozen=True)
class FakeBackend:
    """One FIFO server per replica with a deterministic service time 1 / capacity; capacity grows with TP,
    max_num_seqs and both efficiencies. TTFT = queueing + a fixed floor; TPOT grows with utilisation."""

    base_rate_per_s: float = 4.0
    ttft_floor_s: float = 0.05
    tpot_floor_s: float = 0.02

    def capacity_per_s(self, config: Config, efficiency: Efficiency) -> float:
        return (self.base_rate_per_s * config.tensor_parallel_size * math.sqrt(config.max_num_seqs / 64)
                * efficiency.compute * efficiency.memory)

    def fit(self, config: Config) -> Fit:
        if config.hardware == "small" and config.tensor_parallel_size == 1:
            return Fit(None, "weights 140 GB exceed 80 GB x 0.9")
        return Fit(10_000 * config.tensor_parallel_size)

    def run(self, config: Config, efficiency: Efficiency, rate_per_s: float, num_requests: int,
            stop_slo: Slo | None = None) -> RunResult:
        mu = self.capacity_per_s(config, efficiency)
        rng = np.random.default_rng(0)
        unit_gaps = rng.exponential(1.0, num_requests - 1)
        if math.isinf(rate_per_s):
            arrival = np.zeros(num_requests)
        else:
            arrival = np.concatenate([[0.0], np.cumsum(unit_gaps) / rate_per_s])
        start = np.empty(num_requests)
        finish = np.empty(num_requests)
        free_at = 0.0
        for i, a in enumerate(arrival):
            start[i] = max(a, free_at)
            free_at = finish[i] = start[i] + 1.0 / mu
        utilisation = min(rate_per_s / mu, 2.0)
        tpot = np.full(num_requests, self.tpot_floor_s / efficiency.memory * (1 + utilisation))
        tpot[::10] = np.nan  # single-token answers have no TPOT
        in_flight = np.searchsorted(arrival, finish, side="right") - np.arange(1, num_requests + 1)
        return RunResult(
            ttft_s=start - arrival + self.ttft_floor_s / efficiency.compute,
            tpot_s=tpot,
            finish_s=finish,
            num_prompt_tokens=np.full(num_requests, 100),
            num_output_tokens=rng.integers(10, 200, num_requests),
            kv_time_s=finish,
            kv_usage=np.minimum(1.0, in_flight / config.max_num_seqs),
            mean_num_running=float(np.mean(np.minimum(in_flight + 1, config.max_num_seqs))),
        )

    def bounds(self, config: Config, efficiency: Efficiency, num_requests: int, percentile: float) -> Bounds:
        """The server's capacity (a finite run passes a little above it: `Bounds.passable_rate_per_s`); the latency
        floors."""
        return Bounds(self.capacity_per_s(config, efficiency), self.ttft_floor_s / efficiency.compute,
                      self.tpot_floor_s / efficiency.memory, 0.0, "compute")

    def step_profile(self, config: Config, query_lens: np.ndarray, context_lens: np.ndarray,
                     label: str) -> StepProfile:
        tokens = float(np.sum(query_lens))
        ops = (OpSummary("qkv_proj", 2e9 * tokens, 1e8 + 1e4 * tokens, 1e-4 + 1e-7 * tokens, "memory"),
               OpSummary("attention", 1e8 * tokens, 1e4 * float(np.sum(context_lens)) + 1, 2e-5 * tokens, "memory"),
               OpSummary("mlp", 6e9 * tokens, 3e8 + 1e4 * tokens, 3e-4 + 3e-7 * tokens, "compute"),
               OpSummary("all_reduce", 0.0, 1e4 * tokens, 1e-5, "comm"))
        return StepProfile(label, ops, sum(op.time_s for op in ops), 1e15, 3e12)

    def notes(self) -> tuple[str, ...]:
        return ("fake backend",)


SLO = Slo(ttft_s=0.5, tpot_s=0.05, percentile=90)
PRICES = {"big": Price(3.0, "test offer", "https://example.com", "2026-01-01"),
          "small": Price(1.5, "test offer", "https://example.com", "2026-01-01")}


def _request(**kw: object) -> PlanRequest:
    base = dict(model="llama-tiny", hardware=("big", "small"), workload="sharegpt-chat", slo=SLO,
                target_rate_per_s=20.0, tensor_parallel_sizes=(1, 2), max_num_seqs=(64, 256), sensitivity=True,
                num_requests=400)
    base.update(kw)
    return PlanRequest(**base)


def _passes(backend: FakeBackend, config: Config, rate: float, slo: Slo = SLO) -> bool:
    run = backend.run(config, NOMINAL, rate, searching.num_simulated_requests(400))
    return searching.summarize(run, rate, slo).passes


# ---- the search --------------------------------------------------------------------------------------

def test_search_brackets_the_highest_passing_rate() -> None:
    backend, config = FakeBackend(), Config("big", 2, 64)
    search = searching.search_max_rate(backend, config, NOMINAL, SLO, 400)
    assert search.best is not None and search.best.passes and search.best.rate_per_s == search.max_rate_per_s
    # The bracket's failing end is at most RATE_REL_TOL above the answer, and it failed.
    failing = [p.rate_per_s for p in search.points if not p.passes and p.rate_per_s > search.max_rate_per_s]
    assert min(failing) <= search.max_rate_per_s * (1 + RATE_REL_TOL) + 1e-12
    assert len(search.points) <= 10
    assert search.saturation_rate_per_s == pytest.approx(backend.capacity_per_s(config, NOMINAL), rel=1e-6)
    assert len(search.kv_time_s) == len(search.kv_usage) > 0


def test_search_with_loose_slos_ends_within_tolerance_of_saturation() -> None:
    loose = Slo(ttft_s=1e6, tpot_s=1e6)
    search = searching.search_max_rate(FakeBackend(), Config("big", 1, 64), NOMINAL, loose, 400)
    assert all(p.passes for p in search.points) and len(search.points) <= 5
    assert search.saturation_rate_per_s / (1 + RATE_REL_TOL) <= search.max_rate_per_s < search.saturation_rate_per_s


@pytest.mark.parametrize("slo", [Slo(0.2, 0.05), Slo(2.0, 0.05), Slo(0.5, 0.035), Slo(0.5, 0.05, 99)])
@pytest.mark.parametrize("config", [Config("big", 1, 64), Config("big", 2, 256), Config("big", 8, 256)])
def test_search_answer_passes_and_the_next_rate_up_fails(slo: Slo, config: Config) -> None:
    backend = FakeBackend()
    search = searching.search_max_rate(backend, config, NOMINAL, slo, 400)
    assert len(search.points) <= 9
    assert _passes(backend, config, search.max_rate_per_s, slo)
    above = search.max_rate_per_s * (1 + RATE_REL_TOL)
    assert above >= search.saturation_rate_per_s or not _passes(backend, config, above, slo)


@pytest.mark.parametrize("start_factor", [0.5, 0.9, 1.0, 1.1, 2.0])
def test_warm_search_from_a_nearby_answer_brackets_in_few_runs(start_factor: float) -> None:
    backend, config = FakeBackend(), Config("big", 2, 64)
    cold = searching.search_max_rate(backend, config, NOMINAL, SLO, 400)
    warm = searching.search_max_rate(backend, config, NOMINAL, SLO, 400, cold.max_rate_per_s * start_factor)
    assert _passes(backend, config, warm.max_rate_per_s)
    assert not _passes(backend, config, warm.max_rate_per_s * (1 + RATE_REL_TOL))
    if start_factor in (0.9, 1.0, 1.1):
        assert len(warm.points) <= 4 < len(cold.points) and warm.saturation_rate_per_s is None


def test_search_reports_zero_when_the_latency_floor_exceeds_the_slo() -> None:
    impossible = Slo(ttft_s=0.01, tpot_s=1.0)  # below the fake's 0.05 s TTFT floor
    search = searching.search_max_rate(FakeBackend(), Config("big", 1, 64), NOMINAL, impossible, 400)
    assert search.max_rate_per_s == 0.0 and search.best is None
    assert len(search.points) == 2 + searching.MAX_HALVINGS
    assert min(p.rate_per_s for p in search.points) == pytest.approx(
        searching.FIRST_PROBE_FRACTION * search.saturation_rate_per_s / 2 ** searching.MAX_HALVINGS)


def test_summary_excludes_warmup_and_drain_and_single_token_tpot() -> None:
    n = 100
    ttft = np.zeros(n)
    ttft[:10] = ttft[-10:] = 99.0  # warm-up and drain requests: excluded
    tpot = np.full(n, 0.01)
    tpot[10:19] = np.nan  # one-token answers meet the TPOT SLO ...
    tpot[19] = 0.05  # ... so this one is the only miss: 1 of 80 measured, p98 holds, p99 does not
    run = RunResult(ttft, tpot, np.arange(1.0, n + 1), np.full(n, 7), np.full(n, 3), np.zeros(2),
                    np.array([0.2, 0.6]), 4.0)
    point = searching.summarize(run, 1.0, Slo(1.0, 0.02, 98))
    assert point.ttft_s == 0.0 and point.tpot_s == pytest.approx(0.01) and point.passes
    assert point.peak_kv_usage == 0.6 and point.mean_prompt_tokens == 7
    assert not searching.summarize(run, 1.0, Slo(1.0, 0.02, 99)).passes


def test_slo_percentile_passes_exactly_when_the_share_meeting_the_slo_suffices() -> None:
    values = np.arange(1.0, 101.0)  # 90 of 100 are <= 90
    assert searching.slo_percentile(values, 90) == 90.0
    assert searching.slo_percentile(values, 90.5) == 91.0


def test_num_simulated_requests_leaves_the_requested_number_measured() -> None:
    for n in (1, 400, 2000, 2001):
        total = searching.num_simulated_requests(n)
        window = searching.measured_slice(total)
        assert len(range(total)[window]) >= n


# ---- arithmetic --------------------------------------------------------------------------------------

def _search(rate: float, tp: int = 2) -> Search:
    return Search(Config("big", tp, 64), NOMINAL, rate, rate * 2, (), None)


def test_replicas_round_up_but_not_on_exact_multiples() -> None:
    assert planner.replicas_needed(20.0, _search(20.0 / 3)) == 3
    assert planner.replicas_needed(20.0, _search(6.0)) == 4
    assert planner.replicas_needed(0.1, _search(6.0)) == 1
    assert planner.gpus_needed(20.0, _search(6.0, tp=4)) == 16
    assert planner.replicas_needed(20.0, _search(0.0)) is None


def test_config_plan_cost_per_million_output_tokens() -> None:
    plan = planner.make_plan(_request(sensitivity=False), FakeBackend(), PRICES, num_workers=1)
    c = next(c for c in plan.configs if c.meets_slo)
    tokens_per_hour = 20.0 * c.nominal.best.mean_output_tokens * 3600
    assert c.usd_per_hour == c.num_gpus * c.price.usd_per_gpu_hour
    assert c.usd_per_million_output_tokens == pytest.approx(c.usd_per_hour / tokens_per_hour * 1e6)


def test_plan_ranks_by_cost_and_lists_configs_that_do_not_fit() -> None:
    plan = planner.make_plan(_request(), FakeBackend(), PRICES, num_workers=1)
    assert plan.best is not None
    assert plan.best.usd_per_hour == min(c.usd_per_hour for c in plan.serving)
    unfit = [c for c in plan.configs if not c.fit.fits]
    assert {(c.config.hardware, c.config.tensor_parallel_size) for c in unfit} == {("small", 1)}
    assert all(c.why_not == "weights 140 GB exceed 80 GB x 0.9" and c.nominal is None for c in unfit)
    assert [c.config.hardware for c in plan.best_per_hardware()] == ["big", "small"]


def test_sensitivity_brackets_the_nominal_answer_of_the_best() -> None:
    plan = planner.make_plan(_request(), FakeBackend(), PRICES, num_workers=1)
    assert [c for c in plan.configs if c.pessimistic is not None] == [plan.best]
    for c in (plan.best,):
        assert c.pessimistic.efficiency == PESSIMISTIC and c.optimistic.efficiency == OPTIMISTIC
        # The sensitivity asks for replicas only: its rates are the target / the replicas that passed.
        replicas = [planner.replicas_needed(c.target_rate_per_s, s) for s in (c.optimistic, c.nominal, c.pessimistic)]
        assert replicas[0] <= replicas[1] <= replicas[2]
        fewer, more = c.gpus_range()
        assert fewer <= c.num_gpus <= more


def test_two_workers_give_the_same_plan_as_one() -> None:
    request = _request(hardware=("big",), tensor_parallel_sizes=(1, 2), max_num_seqs=(64,))
    one = planner.make_plan(request, FakeBackend(), PRICES, num_workers=1)
    two = planner.make_plan(request, FakeBackend(), PRICES, num_workers=2)
    assert one == two


def test_request_rejects_bad_input() -> None:
    with pytest.raises(UserError, match="--target-qps"):
        _request(target_rate_per_s=-1.0)
    with pytest.raises(UserError, match="--tensor-parallel-sizes"):
        _request(tensor_parallel_sizes=(0,))
    with pytest.raises(UserError, match="--slo-percentile"):
        Slo(1.0, 1.0, percentile=0)
    with pytest.raises(UserError, match="--slo-ttft-s"):
        Slo(-1.0, 1.0)


# ---- prices ------------------------------------------------------------------------------------------

def test_shipped_prices_name_a_shipped_hardware_a_source_and_a_date() -> None:
    from roofline.registry import list_ids

    prices = pricing.load_prices()
    assert {"h100-sxm", "h200-sxm", "a100-80gb-sxm"} <= set(prices)
    assert set(prices) <= set(list_ids("hardware"))
    for price in prices.values():
        assert price.usd_per_gpu_hour > 0 and price.source.startswith("https://")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", price.read_on)


def test_price_flags_override_and_reject_bad_values() -> None:
    assert pricing.parse_price_flags(["h100-sxm=2.5"]) == {"h100-sxm": 2.5}
    for bad in ("h100-sxm", "h100-sxm=-1", "=2", "h100-sxm=abc"):
        with pytest.raises(UserError, match="--price"):
            pricing.parse_price_flags([bad])
    prices = pricing.prices_for(("h100-sxm", "x"), {"x": 1.0})
    assert prices["x"].usd_per_gpu_hour == 1.0 and prices["h100-sxm"] == pricing.load_prices()["h100-sxm"]
    with pytest.raises(UserError, match="not among --hardware"):
        pricing.prices_for(("h100-sxm",), {"h200-sxm": 1.0})
    assert pricing.prices_for(("x",), {}) == {"x": None}  # no price: ranked by GPUs, not refused


# ---- the report --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[planner.Plan, Path]:
    plan = planner.make_plan(_request(), FakeBackend(), PRICES, num_workers=1)
    out = tmp_path_factory.mktemp("plan")
    write_report(plan, out)
    return plan, out


def test_report_files_exist_and_the_html_embeds_every_image(small_report: tuple[planner.Plan, Path]) -> None:
    _, out = small_report
    html_text = (out / "report.html").read_text()
    md_text = (out / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md_text)
    assert {"cost.png", "pareto.png", "latency_vs_load.png", "kv_usage.png", "step_breakdown.png",
            "roofline_big.png", "roofline_small.png"} == set(images)
    embedded = re.findall(r'<img src="data:image/png;base64,([^"]+)"', html_text)
    assert len(embedded) == len(images) == len(re.findall(r"<img ", html_text))  # no image loaded from a file
    assert sorted(base64.b64decode(e) for e in embedded) == sorted((out / n).read_bytes() for n in images)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _md_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_numbers_in_the_report_equal_those_in_the_csvs(small_report: tuple[planner.Plan, Path]) -> None:
    plan, out = small_report
    shown = report_tables(plan, all_tables(plan))
    md_tables = _md_tables((out / "report.md").read_text())
    html_text = (out / "report.html").read_text()
    csv_of = {"best_per_hardware": "best_per_hardware", "serving": "serving", "not_serving": "configurations",
              "prices": "prices", "pareto_front": "pareto_front"}
    for key, table in shown.items():
        rows = _read_csv(out / f"{csv_of[key]}.csv")
        if key == "not_serving":
            rows = [r for r in rows if r["status"] != "serves"]
        expected = [[r[c] for c in table.columns] for r in rows][:MAX_SHOWN_ROWS]
        assert expected and [list(r) for r in table.rows] == expected
        # The same cells appear in report.md (a table with these rows) and report.html.
        assert any(t[2:] == [[v.replace("|", "\\|") for v in r] for r in expected] for t in md_tables), key
        for row in expected:
            assert "".join(f">{v}</td>" for v in row) in re.sub(r"<td[^>]*>", ">", html_text.replace(
                "&amp;", "&")).replace("&gt;", ">"), (key, row)
    # The answer's numbers come from the best configuration's CSV row.
    best = next(r for r in _read_csv(out / "configurations.csv")
                if (r["hardware"], r["tensor_parallel_size"], r["max_num_seqs"])
                == (plan.best.config.hardware, str(plan.best.config.tensor_parallel_size),
                    str(plan.best.config.max_num_seqs)))
    answer = (out / "report.md").read_text().split("## Answer")[1].split("\n- ")[0]
    for column in ("num_gpus", "usd_per_hour", "usd_per_million_output_tokens", "pessimistic_num_gpus",
                   "optimistic_num_gpus", "pessimistic_usd_per_million_output_tokens"):
        assert best[column] and best[column] in answer, column


def test_csv_rows_cover_every_configuration_and_probe(small_report: tuple[planner.Plan, Path]) -> None:
    plan, out = small_report
    assert len(_read_csv(out / "configurations.csv")) == len(plan.configs) == 8
    assert len(_read_csv(out / "search_probes.csv")) == plan.num_simulations


def test_report_is_byte_identical_for_the_same_plan(small_report: tuple[planner.Plan, Path],
                                                     tmp_path: Path) -> None:
    plan, out = small_report
    write_report(plan, tmp_path)
    for path in sorted(out.iterdir()):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize(("prune", "reason"), [(True, "SLOs missed at any rate, before simulating: the TTFT"),
                                               (False, "SLOs missed even at")])
def test_report_without_any_serving_configuration(tmp_path: Path, prune: bool, reason: str) -> None:
    plan = planner.make_plan(_request(slo=Slo(0.01, 1.0), sensitivity=False, hardware=("big",),
                                      tensor_parallel_sizes=(1,), max_num_seqs=(64,), prune=prune), FakeBackend(),
                             PRICES, 1)
    write_report(plan, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "No configuration serves" in text and reason in text
    assert (plan.num_simulations == 0) == prune


def test_sig_formats_without_exponents() -> None:
    assert [sig(x) for x in (1234.5, 0.012345, 1.0, 0.0, None)] == ["1230", "0.0123", "1.00", "0", ""]
    assert Table("t", ("a",), (("1",),)).to_csv() == "a\n1\n"


# ---- the real backend --------------------------------------------------------------------------------

def test_scale_efficiency_moves_every_compute_and_memory_fraction() -> None:
    from dataclasses import fields

    from roofline.cost.hardware import load_profile

    hw = replace(load_profile("h100-sxm"), uncertainty=None)  # (a profile without measured uncertainty)
    named = set(backend.COMPUTE_EFFICIENCIES) | set(backend.MEMORY_EFFICIENCIES) | set(backend.UNSCALED_EFFICIENCIES)
    # A new *_efficiency field must be classified: this fails until it is.
    assert {f.name for f in fields(hw.efficiency) if f.name.endswith("_efficiency")} == named
    low = backend.scale_efficiency(hw, PESSIMISTIC)
    for name in backend.COMPUTE_EFFICIENCIES + backend.MEMORY_EFFICIENCIES:
        assert getattr(low.efficiency, name) == pytest.approx(0.9 * getattr(hw.efficiency, name))
    for name in backend.UNSCALED_EFFICIENCIES:
        assert getattr(low.efficiency, name) == getattr(hw.efficiency, name)
    high = backend.scale_efficiency(replace(hw, efficiency=replace(hw.efficiency, memory_efficiency=0.95)),
                                    OPTIMISTIC)
    assert high.efficiency.memory_efficiency == 1.0  # capped


def test_with_measured_uncertainty_the_sensitivity_moves_operator_times_to_their_percentiles() -> None:
    from roofline.cost.hardware import load_profile
    from roofline.cost.uncertainty import KINDS
    from roofline.planning.plan import sensitivity_band

    hw = load_profile("h100-sxm")
    low, high = backend.scale_efficiency(hw, PESSIMISTIC), backend.scale_efficiency(hw, OPTIMISTIC)
    assert low.efficiency == high.efficiency == hw.efficiency  # the efficiencies stay; the operator times move
    for kind in KINDS:
        slow, fast = getattr(low.op_time_factors, kind), getattr(high.op_time_factors, kind)
        assert slow == pytest.approx(float(hw.uncertainty.ratio_at(kind, np.array([0.9]))[0]), rel=1e-5)
        assert fast == pytest.approx(float(hw.uncertainty.ratio_at(kind, np.array([0.1]))[0]), rel=1e-5)
        assert fast < 1 < slow, kind
    assert "90th (pessimistic)" in sensitivity_band(["h100-sxm"])
    assert "10 % lower" in sensitivity_band(["mi300x"]) and "90th" not in sensitivity_band(["mi300x"])


def test_workload_at_rate_scales_arrivals_and_keeps_the_requests() -> None:
    from roofline.sim.workload import load_workload, sample_requests

    wl = load_workload("sharegpt-chat")
    slow = sample_requests(backend.workload_at_rate(wl, 2.0, 50)[0])
    fast = sample_requests(backend.workload_at_rate(wl, 4.0, 50)[0])
    burst = sample_requests(backend.workload_at_rate(wl, math.inf, 50)[0])
    assert len(slow) == 50
    assert [s.num_prompt_tokens for s in slow] == [s.num_prompt_tokens for s in fast]
    assert [s.arrival_s for s in fast] == pytest.approx([s.arrival_s / 2 for s in slow])
    assert all(s.arrival_s == 0 for s in burst)


def test_cli_writes_a_report_with_the_real_simulator(tmp_path: Path) -> None:
    from roofline.cli import main

    out = tmp_path / "plan"
    rc = main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
               "--slo-ttft-s", "2", "--slo-tpot-s", "0.1", "--target-qps", "5", "--tensor-parallel-sizes", "1",
               "--max-num-seqs", "64", "--no-sensitivity", "--num-requests", "60", "--workers", "1",
               "--max-model-len", "16384", "--out", str(out)])
    assert rc == 0
    rows = _read_csv(out / "configurations.csv")
    assert len(rows) == 1 and rows[0]["status"] == "serves" and float(rows[0]["max_rate_per_replica_per_s"]) > 0
    assert (out / "roofline_h100-sxm.png").exists() and (out / "report.html").exists()
    assert "hardware profile h100-sxm: fitted (hopper family" in (out / "report.md").read_text()


def test_cli_rejects_bad_flags_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from roofline.cli import main

    base = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--slo-ttft-s", "2", "--slo-tpot-s", "0.1", "--target-qps", "5", "--out", str(tmp_path)]
    for extra, flag in ((["--tensor-parallel-sizes", "1,x"], "--tensor-parallel-sizes"),
                        (["--price", "h100-sxm=free"], "--price"), (["--price", "b200=5"], "--price"),
                        (["--hardware", "nope"], "--hardware"), (["--target-qps", "0"], "--target-qps")):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and flag in err, err


def test_cli_exits_1_when_nothing_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    rc = main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
               "--slo-ttft-s", "0.000001", "--slo-tpot-s", "0.1", "--target-qps", "5", "--tensor-parallel-sizes", "1",
               "--max-num-seqs", "64", "--no-sensitivity", "--num-requests", "20", "--workers", "1",
               "--max-model-len", "16384", "--out", str(tmp_path / "plan")])
    assert rc == 1
    assert "no configuration serves the target" in capsys.readouterr().err
    assert (tmp_path / "plan" / "report.html").exists()  # the report says why


def test_max_model_len_defaults_to_the_longest_request_so_70b_fits_on_two_h100() -> None:
    from roofline.engine_args import EngineArgs
    from roofline.sim.workload import load_workload, sample_requests

    choice = backend.choose_max_model_len("sharegpt-chat", 125, 16, 131072)
    totals = [s.num_prompt_tokens + s.num_output_tokens
              for s in sample_requests(backend.workload_at_rate(load_workload("sharegpt-chat"), 1.0, 125)[0])]
    assert choice.longest_request_tokens == max(totals)
    assert choice.max_model_len % 16 == 0 and 0 <= choice.max_model_len - max(totals) < 16
    assert all(n == sum(t > length for t in totals) for length, n in choice.rejected_below)
    assert "rounded up to the block size" in choice.note()
    assert backend.choose_max_model_len("sharegpt-chat", 125, 16, 4096).max_model_len == 4096  # capped
    # With the model's 131,072 positions one request's KV does not fit next to 70B weights on two H100s.
    default = backend.SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs())
    chosen = backend.SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs(max_model_len=choice.max_model_len))
    assert not default.fit(Config("h100-sxm", 2, 64)).fits and chosen.fit(Config("h100-sxm", 2, 64)).fits


def test_the_answer_names_a_pre_quantized_checkpoint_s_own_weights(small_report: tuple[planner.Plan, Path]) -> None:
    """Without --quantization a pre-quantized checkpoint serves (and is simulated in) its own format: the answer
    says so instead of "unquantized", and the deploy line's placeholder names no quantization."""
    from roofline.engine_args import EngineArgs
    from roofline.planning.deploy import vllm_serve_command
    from roofline.planning.report import all_tables, answer_text

    plan, _ = small_report
    assert plan.best is not None and plan.best.config.quantization == "none"
    assert "(unquantized, " in answer_text(plan, all_tables(plan))
    block = replace(plan, request=replace(plan.request, checkpoint_quantization="fp8-block"))
    assert "(the checkpoint's fp8-block weights, " in answer_text(block, all_tables(block))
    assert vllm_serve_command("m", EngineArgs(), plan.best, {}).startswith("vllm serve '<m checkpoint>' ")


def test_vllm_serve_lines_use_only_vllm_0_32_flags(small_report: tuple[planner.Plan, Path]) -> None:
    from roofline.engine_args import EngineArgs
    from roofline.planning.deploy import parse_checkpoints, plan_json, vllm_serve_command

    known = {line for line in (Path(__file__).parent / "data" / "vllm-0.32.0-engine-flags.txt").read_text().split()
             if line.startswith("--")}
    plan, _ = small_report
    best = plan.best
    quantized = replace(best, config=replace(best.config, quantization="fp8", kv_cache_dtype="fp8",
                                             max_num_batched_tokens=4096))
    engines = [EngineArgs(), EngineArgs(dtype="bfloat16", enable_prefix_caching=False, enable_chunked_prefill=False,
                                        max_model_len=4096, gpu_memory_utilization=0.8),
               EngineArgs(max_cudagraph_capture_size=2048)]
    for engine in engines:
        for serving in (best, quantized):
            line = vllm_serve_command("m", engine, serving, {})
            flags = {w for w in line.split() if w.startswith("--")}
            assert flags <= known, flags - known
            assert f"--tensor-parallel-size {serving.config.tensor_parallel_size}" in line
    assert "--max-cudagraph-capture-size 2048" in vllm_serve_command("m", engines[2], best, {})
    line = vllm_serve_command("m", engines[1], quantized, {})
    assert "--quantization fp8" in line and "--kv-cache-dtype fp8" in line and "--max-num-batched-tokens 4096" in line
    with_checkpoint = vllm_serve_command("m", engines[1], quantized, parse_checkpoints(["fp8=org/m-FP8"], "fp8"))
    assert with_checkpoint.startswith("vllm serve org/m-FP8 ") and "--quantization" not in with_checkpoint
    # Every engine flag the user gave is in the line; what vLLM reads from its environment, as a prefix.
    marlin = vllm_serve_command("m", EngineArgs(moe_backend="marlin", async_scheduling=False), best, {})
    assert "--moe-backend marlin" in marlin and "--no-async-scheduling" in marlin
    assert {w for w in marlin.split() if w.startswith("--")} <= known
    env = vllm_serve_command("m", EngineArgs(moe_backend="flashinfer-mxfp4-mxfp8", float32_matmul_precision="high"),
                             best, {})
    assert env.startswith("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 VLLM_FLOAT32_MATMUL_PRECISION=high vllm serve ")
    assert "--moe-backend" not in env
    graphs = vllm_serve_command("m", EngineArgs(cudagraph_mode="FULL_DECODE_ONLY"), best, {})
    assert "--compilation-config.cudagraph_mode FULL_DECODE_ONLY" in graphs  # vLLM's dotted config syntax
    assert "--enforce-eager" in vllm_serve_command("m", EngineArgs(enforce_eager=True), best, {}).split()
    for bad in (["fp8"], ["awq=org/m-AWQ"]):
        with pytest.raises(UserError, match="--checkpoint"):
            parse_checkpoints(bad, "fp8")
    doc = plan_json(plan, EngineArgs(), {})
    assert len(doc["configurations"]) == len(plan.configs)
    assert [c["is_best"] for c in doc["configurations"]].count(True) == 1
    for c in doc["configurations"]:
        assert (c["reason"] is None) == c["serves"] and (c["vllm_serve"] is not None) == c["serves"]


def test_layouts_differing_only_in_dp_or_ep_are_distinct_rows_and_shown_only_when_searched(tmp_path: Path) -> None:
    plan = planner.make_plan(_request(hardware=("big",), tensor_parallel_sizes=(2,), max_num_seqs=(64,),
                                      data_parallel_sizes=(1, 2), expert_parallel=(False, True), sensitivity=False),
                             FakeBackend(), PRICES, num_workers=1)
    write_report(plan, tmp_path)
    rows = _read_csv(tmp_path / "configurations.csv")
    keys = {(r["tensor_parallel_size"], r["pipeline_parallel_size"], r["data_parallel_size"], r["expert_parallel"])
            for r in rows}
    assert keys == {("2", "1", dp, ep) for dp in ("1", "2") for ep in ("no", "yes")}
    shown = report_tables(plan, all_tables(plan))["serving"].columns
    assert "data_parallel_size" in shown and "expert_parallel" in shown and "pipeline_parallel_size" not in shown
    assert plan.best is not None and len(re.findall(r'<tr class="best">', (tmp_path / "report.html").read_text())) >= 1
    # A TP-only search shows no layout column (the CSVs still hold them).
    tp_only = planner.make_plan(_request(sensitivity=False), FakeBackend(), PRICES, num_workers=1)
    assert not {"data_parallel_size", "expert_parallel", "pipeline_parallel_size"} & set(
        report_tables(tp_only, all_tables(tp_only))["serving"].columns)


@pytest.mark.slow  # two plans with the real simulator (~20 s of CPU)
def test_a_profile_with_wider_uncertainty_gives_the_plan_a_wider_range(tmp_path: Path) -> None:
    """Issue 41: the plan's answer (GPUs for the target rate) with its pessimistic and optimistic GPUs, each operator
    kind at the 90th / 10th percentile of its measured / predicted: a profile whose uncertainty is wider gives a wider
    range around the same nominal answer, and the report states the confidence."""
    from roofline.cli import main
    from tests.test_intervals import _profile_with

    gpus = {}
    for name, spread in (("narrow", 0.03), ("wide", 0.3)):
        out, profile = tmp_path / name, _profile_with(tmp_path, spread, name)
        rc = main(["plan", "--model", "llama-3.1-8b", "--hardware", str(profile), "--workload", "sharegpt-chat",
                   "--slo-ttft-s", "2", "--slo-tpot-s", "0.1", "--target-qps", "200", "--tensor-parallel-sizes", "1",
                   "--max-num-seqs", "64", "--num-requests", "30", "--workers", "1", "--max-model-len", "16384",
                   "--price", f"{profile}=2", "--out", str(out)])
        assert rc == 0
        row = _read_csv(out / "configurations.csv")[0]
        gpus[name] = [int(row[k]) for k in ("optimistic_num_gpus", "num_gpus", "pessimistic_num_gpus")]
        assert "(90 % confidence if the kinds' errors move together" in (out / "report.md").read_text()
    narrow, wide = gpus["narrow"], gpus["wide"]
    assert narrow[1] == wide[1]  # the nominal answer does not read the uncertainty
    assert wide[0] <= narrow[0] <= narrow[1] <= narrow[2] <= wide[2], gpus
    assert wide[2] - wide[0] > narrow[2] - narrow[0], gpus
