"""roofline plan over every engine knob: pruning with reasons and fixes (no simulation), the cheapest configuration
and the Pareto front, ITL and end-to-end SLOs, hardware without a price, readable log axes, the CLI's list flags
and exit codes, and identical plans on every executor (serial, local processes, a local Ray)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_plan import PRICES, SLO, FakeBackend, _request

from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.planning import plan as planner
from roofline.planning.backend import SimulatorBackend
from roofline.planning.deploy import plan_json
from roofline.planning.executor import LocalExecutor, RayExecutor
from roofline.planning.plan import ConfigPlan, Plan, PlanRequest
from roofline.planning.prices import Price
from roofline.planning.report import setup_lines
from roofline.planning.search import NOMINAL, Config, Fit, Point, RunResult, Search, Slo, summarize

# Llama-3.1-70B's weights are ~131 GiB in bf16: one 80 GB H100 cannot hold them, two can, with ~27k tokens of
# KV cache left at max_num_seqs 64: a 32k-token max_model_len does not fit there.
BACKEND_70B = SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs(max_model_len=9008))
BACKEND_70B_32K = SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs(max_model_len=32768))


# ---- pruning -----------------------------------------------------------------------------------------

def _applied(backend: SimulatorBackend, config: Config, fix: str) -> tuple[SimulatorBackend, Config]:
    """The backend and configuration with one suggested change made."""
    if m := re.fullmatch(r"needs TP >= (\d+)", fix):
        return backend, replace(config, tensor_parallel_size=int(m.group(1)))
    if m := re.fullmatch(r"fits with TP (\d+)(?: or \d+)?", fix):
        return backend, replace(config, tensor_parallel_size=int(m.group(1)))
    if m := re.fullmatch(r"fits with --kv-cache-dtype (\S+)", fix):
        return backend, replace(config, kv_cache_dtype=m.group(1))
    if m := re.fullmatch(r"fits with --quantization (\S+)", fix):
        return backend, replace(config, quantization=m.group(1))
    if m := re.fullmatch(r"lower --max-model-len to ([\d,]+)", fix):
        length = int(m.group(1).replace(",", ""))
        return replace(backend, engine=replace(backend.engine, max_model_len=length)), config
    raise AssertionError(f"unknown fix: {fix}")


@pytest.mark.parametrize("backend, config, expected", [
    (BACKEND_70B, Config("h100-sxm", 1, 64), {"needs TP >= 2", "fits with --quantization awq"}),  # fp8: 70 GB
    (BACKEND_70B, Config("h100-sxm", 3, 64), {"fits with TP 2 or 4"}),
    (BACKEND_70B, Config("h100-sxm", 16, 64), {"fits with TP 4 or 8"}),
    (BACKEND_70B_32K, Config("h100-sxm", 2, 64), {"needs TP >= 4", "fits with --kv-cache-dtype fp8",
                                                  "fits with --quantization fp8", "lower --max-model-len to"}),
])
def test_a_configuration_that_cannot_fit_is_pruned_with_its_reason_and_each_checked_fix(
        backend: SimulatorBackend, config: Config, expected: set[str]) -> None:
    fit = backend.fit(config)
    assert not fit.fits and fit.reason and fit.fix
    fixes = fit.fix.split("; or ")
    assert {next(w for w in expected if f.startswith(w)) for f in fixes} == expected, fixes
    for fix in fixes:  # every suggestion, applied alone, makes it fit
        changed_backend, changed = _applied(backend, config, fix)
        assert changed_backend.fit(changed).fits, fix


def test_the_suggested_max_model_len_is_the_longest_that_fits() -> None:
    config = Config("h100-sxm", 2, 64)
    fit = BACKEND_70B_32K.fit(config)
    length = int(re.search(r"lower --max-model-len to ([\d,]+)", fit.fix).group(1).replace(",", ""))
    assert 16_000 < length < 32_768
    longer = replace(BACKEND_70B_32K, engine=replace(BACKEND_70B_32K.engine, max_model_len=length + 16))
    assert not longer.fit(config).fits


def test_reasons_name_the_cause() -> None:
    assert "does not fit" in BACKEND_70B.fit(Config("h100-sxm", 1, 64)).reason
    assert "must divide num_attention_heads" in BACKEND_70B.fit(Config("h100-sxm", 3, 64)).reason
    assert "domain" in BACKEND_70B.fit(Config("h100-sxm", 16, 64)).reason


class _NoSimulation(FakeBackend):
    def run(self, *args: object) -> RunResult:
        raise AssertionError("a pruned configuration was simulated")


def test_pruned_configurations_are_never_simulated() -> None:
    plan = planner.make_plan(_request(hardware=("small",), tensor_parallel_sizes=(1,)), _NoSimulation(), PRICES, 1)
    assert len(plan.pruned) == len(plan.configs) == 2 and plan.num_simulations == 0 and plan.best is None


class _RealFitFakeRun(FakeBackend):
    def fit(self, config: Config) -> Fit:
        return BACKEND_70B.fit(config)


def test_plan_json_lists_every_pruned_configuration_with_reason_and_fix() -> None:
    request = PlanRequest(model="llama-3.1-70b", hardware=("h100-sxm",), workload="sharegpt-chat", slo=SLO,
                          target_rate_per_s=1.0, tensor_parallel_sizes=(1, 3), max_num_seqs=(64,),
                          quantizations=("none", "awq"), sensitivity=False, num_requests=100)
    plan = planner.make_plan(request, _RealFitFakeRun(), {"h100-sxm": None}, 1)
    doc = plan_json(plan, EngineArgs(max_model_len=9008), {})
    by_label = {c["label"]: c for c in doc["configurations"]}
    assert set(by_label) == {"h100-sxm TP1 seqs64", "h100-sxm TP1 awq seqs64", "h100-sxm TP3 seqs64",
                             "h100-sxm TP3 awq seqs64"}
    assert by_label["h100-sxm TP1 awq seqs64"]["fits"] and by_label["h100-sxm TP1 awq seqs64"]["fix"] is None
    unfit = by_label["h100-sxm TP1 seqs64"]
    assert not unfit["fits"] and "needs TP >= 2" in unfit["fix"] and unfit["reason"]
    assert doc["num_pruned"] == 3


# ---- the search space --------------------------------------------------------------------------------

def test_configs_cover_every_knob_and_keep_max_num_seqs_ascending_per_family() -> None:
    request = _request(hardware=("big",), tensor_parallel_sizes=(2, 1), max_num_seqs=(256, 64),
                       quantizations=("none", "fp8"), kv_cache_dtypes=("auto", "fp8"),
                       max_num_batched_tokens=(16384, None))
    configs = request.configs()
    assert len(configs) == len(set(configs)) == 2 * 2 * 2 * 2 * 2
    assert {c.max_num_batched_tokens for c in configs} == {None, 16384}
    families: dict[tuple, list[int]] = {}
    for c in configs:
        families.setdefault(c.label.rsplit(" seqs", 1)[0] + str(c.max_num_batched_tokens), []).append(c.max_num_seqs)
    assert all(seqs == [64, 256] for seqs in families.values())
    assert Config("h", 2, 64, "fp8", "fp8", 8192).label == "h TP2 fp8 kv-fp8 seqs64 tokens8192"


def test_request_rejects_bad_lists_naming_the_flag_and_the_choices() -> None:
    with pytest.raises(UserError, match=r"--quantizations: 'fp4' is not allowed; allowed: none, fp8"):
        _request(quantizations=("none", "fp4"))
    with pytest.raises(UserError, match="--kv-cache-dtypes: 'int4' is not allowed; allowed: auto"):
        _request(kv_cache_dtypes=("int4",))
    with pytest.raises(UserError, match="--max-num-batched-tokens-list"):
        _request(max_num_batched_tokens=(0,))


# ---- cheapest and Pareto front -----------------------------------------------------------------------

def _serving(label: str, tp: int, rate: float, usd_per_gpu_hour: float | None, load_ratio: float = 0.5,
             seqs: int = 64) -> ConfigPlan:
    config = Config(label, tp, seqs)
    point = Point(rate, 0.1, 0.01, rate, True, 100.0, 100.0, 0.5, 8.0)
    price = None if usd_per_gpu_hour is None else Price(usd_per_gpu_hour, "o", "s", "2026-01-01")
    return ConfigPlan(config, Fit(1000), price, 10.0, Search(config, NOMINAL, rate, None, (point,), point),
                      load_ratio=load_ratio)


def test_pareto_front_and_cheapest_of_cost_against_sustained_rate() -> None:
    configs = (
        _serving("a", 1, 2.5, 2.0, 0.9),   # 4 replicas, 4 GPUs: 8 USD/h, sustains 10
        _serving("b", 2, 6.0, 2.0, 0.5),   # 2 replicas, 4 GPUs: 8 USD/h, sustains 12 -> beats a
        _serving("c", 4, 11.0, 2.0, 0.7),  # 1 replica, 4 GPUs: 8 USD/h, sustains 11 -> beaten by b
        _serving("d", 8, 30.0, 2.0),  # 1 replica, 8 GPUs: 16 USD/h, sustains 30
        _serving("e", 1, 1.0, 3.0),   # 10 replicas: 30 USD/h, sustains 10 -> beaten by d
        _serving("f", 1, 10.0, None),  # no price: on no front, ranked after the priced ones
    )
    plan = Plan(_request(hardware=("a", "b", "c", "d", "e", "f")), configs)
    assert [c.config.hardware for c in plan.pareto_front()] == ["b", "d"]
    assert plan.cheapest.config.hardware == "b" and plan.best is plan.cheapest
    # a, b and c cost the same on the same GPUs: the most headroom at the target load first (the lowest worst SLO
    # ratio at target / replicas), after more max_num_seqs
    assert [c.config.hardware for c in plan.ranked()] == ["b", "c", "a", "d", "e", "f"]
    more_seqs = Plan(_request(hardware=("a", "b")), (_serving("a", 1, 2.5, 2.0, 0.9, seqs=128), configs[1]))
    assert [c.config.hardware for c in more_seqs.ranked()] == ["a", "b"]
    assert plan.unpriced_hardware == ["f"]


def test_front_of_a_searched_plan_is_non_dominated_and_covers_every_other(tmp_path: Path) -> None:
    plan = planner.make_plan(_request(sensitivity=False, max_num_seqs=(64, 128, 256)), FakeBackend(), PRICES, 1)
    front = plan.pareto_front()
    assert front and front[0] is plan.cheapest
    for c in plan.serving:
        beaten = [f for f in front if f.usd_per_hour <= c.usd_per_hour
                  and f.sustained_rate_per_s >= c.sustained_rate_per_s]
        assert beaten, c.config.label  # on the front or dominated by a front point
    for a, b in zip(front, front[1:]):
        assert a.usd_per_hour < b.usd_per_hour and a.sustained_rate_per_s < b.sustained_rate_per_s


def test_hardware_without_a_price_is_ranked_by_gpus_with_a_note() -> None:
    prices = {"big": None, "small": None}
    plan = planner.make_plan(_request(sensitivity=False), FakeBackend(), prices, 1)
    assert plan.best is not None and plan.cheapest is None and plan.pareto_front() == []
    assert [c.num_gpus for c in plan.ranked()] == sorted(c.num_gpus for c in plan.ranked())
    assert any("no shipped price" in line and "--price big=" in line for line in setup_lines(plan))


# ---- ITL and end-to-end SLOs -------------------------------------------------------------------------

def _run_with_itl(gap_s: float) -> RunResult:
    n = 100
    ttft = np.full(n, 0.1)
    itl_request = np.repeat(np.arange(n), 3)
    gaps = np.full(3 * n, 0.01)
    gaps[:30] = 9.0  # the gaps of warm-up requests (rows 0-9) do not count
    gaps[30 * 3:30 * 3 + 3] = gap_s  # request 30: measured
    return RunResult(ttft, np.full(n, 0.01), np.arange(1.0, n + 1), np.full(n, 7), np.full(n, 4), np.zeros(1),
                     np.zeros(1), 1.0, e2e_s=np.full(n, 2.0), itl_s=gaps, itl_request_index=itl_request)


def test_itl_and_e2e_slos_judge_the_measured_requests() -> None:
    point = summarize(_run_with_itl(0.01), 1.0, Slo(1.0, 1.0, 100, itl_s=0.02, e2el_s=2.0))
    assert point.itl_s == pytest.approx(0.01) and point.e2e_s == 2.0 and point.passes
    assert not summarize(_run_with_itl(0.5), 1.0, Slo(1.0, 1.0, 100, itl_s=0.02)).passes
    assert summarize(_run_with_itl(0.5), 1.0, Slo(1.0, 1.0, 98, itl_s=0.02)).passes  # 3 of 240 gaps: within p98
    assert not summarize(_run_with_itl(0.01), 1.0, Slo(1.0, 1.0, 90, e2el_s=1.9)).passes
    assert Slo(2.0, 0.08, itl_s=0.1, e2el_s=20).limits() == {"ttft": 2.0, "tpot": 0.08, "itl": 0.1, "e2el": 20}
    with pytest.raises(UserError, match="--slo-e2el-s"):
        Slo(1.0, 1.0, e2el_s=0.0)


# ---- readable axes -----------------------------------------------------------------------------------

def test_log_axes_read_as_plain_numbers() -> None:
    from roofline.figures import new_figure
    from roofline.planning.plots import plain_number, readable_log_axis

    assert [plain_number(v) for v in (0.02, 2.0, 500.0, 2e4, 3e12)] == ["0.02", "2", "500", "20k", "3 T"]
    for lo, hi in ((1.5, 4.0), (0.01, 0.05), (1e-3, 10.0)):
        fig = new_figure(4, 3)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([1, 2], [lo, hi])
        ax.set_yscale("log")
        readable_log_axis(ax.yaxis)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert len(labels) >= 2 and not any("10^" in t or "times" in t or "$" in t for t in labels), labels


# ---- the CLI -----------------------------------------------------------------------------------------

CLI_BASE = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--slo-ttft-s", "2", "--slo-tpot-s", "0.1", "--target-qps", "5"]


@pytest.mark.parametrize("extra, flag", [
    (["--quantization", "fp8", "--quantizations", "none,fp8"], "--quantizations"),
    (["--kv-cache-dtype", "fp8", "--kv-cache-dtypes", "auto"], "--kv-cache-dtypes"),
    (["--max-num-batched-tokens", "8192", "--max-num-batched-tokens-list", "8192"], "--max-num-batched-tokens-list"),
    (["--quantizations", "none,fp4"], "--quantizations"),
    (["--kv-cache-dtypes", "fp4"], "--kv-cache-dtypes"),
    (["--max-num-batched-tokens-list", "8192,x"], "--max-num-batched-tokens-list"),
    (["--workers", "2", "--ray-address", "auto"], "--workers"),
    (["--slo-itl-s", "-1"], "--slo-itl-s"),
    (["--checkpoint", "awq=org/m", "--quantizations", "none,fp8"], "--checkpoint"),
])
def test_cli_refuses_bad_search_flags_in_one_line(extra: list[str], flag: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    assert main(CLI_BASE + ["--out", str(tmp_path / "p")] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err, err


def test_cli_exits_1_when_nothing_fits_without_simulating(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    rc = main(["plan", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
               "--slo-ttft-s", "2", "--slo-tpot-s", "0.1", "--target-qps", "5", "--tensor-parallel-sizes", "1,3",
               "--max-num-seqs", "64", "--no-sensitivity", "--workers", "1", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 1 and "no configuration serves" in err and (
        "2 do not fit, 0 pruned by the cost model's bounds or by cost; 0 simulations" in err)


def test_cli_searches_the_lists_and_writes_them_into_plan_json(tmp_path: Path) -> None:
    import json

    from roofline.cli import main

    out = tmp_path / "p"
    rc = main(CLI_BASE + ["--tensor-parallel-sizes", "1", "--max-num-seqs", "32", "--quantizations", "none,fp8",
                          "--kv-cache-dtype", "fp8", "--max-num-batched-tokens-list", "2048", "--no-sensitivity",
                          "--num-requests", "12", "--workers", "1", "--max-model-len", "8192",
                          "--slo-e2el-s", "60", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "plan.json").read_text())
    assert {(c["quantization"], c["kv_cache_dtype"], c["max_num_batched_tokens"]) for c in doc["configurations"]} \
        == {("none", "fp8", 2048), ("fp8", "fp8", 2048)}
    assert doc["slo"]["e2el_s"] == 60 and doc["vllm_bench_goodput"] == "ttft:2000 tpot:100 e2el:60000"
    assert doc["cheapest"] and doc["pareto_front"][0]["label"] == doc["cheapest"]
    best = next(c for c in doc["configurations"] if c["is_best"])
    assert "--kv-cache-dtype fp8" in best["vllm_serve"] and "--max-num-batched-tokens 2048" in best["vllm_serve"]


# ---- executors ---------------------------------------------------------------------------------------

SMALL_REQUEST = PlanRequest(model="llama-3.1-8b", hardware=("h100-sxm",), workload="sharegpt-chat",
                            slo=Slo(2.0, 0.1, itl_s=0.5), target_rate_per_s=5.0, tensor_parallel_sizes=(1,),
                            max_num_seqs=(16, 32), sensitivity=False, num_requests=12)
SMALL_BACKEND = SimulatorBackend("llama-3.1-8b", "sharegpt-chat", EngineArgs(max_model_len=8192))


@pytest.fixture(scope="module")
def serial_plan() -> Plan:
    with LocalExecutor(1) as serial:
        return planner.make_plan(SMALL_REQUEST, SMALL_BACKEND, {"h100-sxm": None}, executor=serial)


def test_a_local_process_pool_gives_the_serial_plan(serial_plan: Plan) -> None:
    assert serial_plan.num_simulations > 2 and serial_plan.load_curves
    with LocalExecutor(2) as pool:
        assert planner.make_plan(SMALL_REQUEST, SMALL_BACKEND, {"h100-sxm": None}, executor=pool) == serial_plan


def test_a_local_ray_gives_the_serial_plan(serial_plan: Plan) -> None:
    # About 20-30 s on 2 idle cores, most of it Ray starting; not asserted (a shared machine is slower).
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        with RayExecutor() as executor:  # the Ray initialised above
            plan = planner.make_plan(SMALL_REQUEST, SMALL_BACKEND, {"h100-sxm": None}, executor=executor)
    finally:
        ray.shutdown()
    assert plan == serial_plan


def test_executors_return_results_in_item_order() -> None:
    with LocalExecutor(2) as pool:
        assert pool.map(abs, [-3, 1, -2, 0]) == [3, 1, 2, 0]
    with pytest.raises(UserError, match="--workers"):
        LocalExecutor(0)
