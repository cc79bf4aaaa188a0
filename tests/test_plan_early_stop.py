"""roofline.planning.early_stop with the real simulator: a run stopped early is the whole run's first part, the floors
never exceed the whole run's latencies, a stopped probe fails as its whole run does, and a pruned plan (bounds,
branch and bound, probes stopped early) gives the answer of the exhaustive one (every configuration searched with
whole probes) on a small space."""

from __future__ import annotations

import numpy as np

from roofline.engine_args import EngineArgs
from roofline.planning import plan as planner
from roofline.planning.backend import SimulatorBackend, _workload, choose_max_model_len, workload_at_rate
from roofline.planning.early_stop import floors, slo_early_stop
from roofline.planning.prices import prices_for
from roofline.planning.prune import probe_task
from roofline.planning.search import NOMINAL, Config, Slo, measured_slice
from roofline.sim.simulator import EarlyStop, SimulationOptions, run_simulation
from roofline.sim.workload import sample_requests

MODEL, WORKLOAD, HARDWARE = "llama-3.1-8b", "sharegpt-chat", ("h100-sxm", "a100-80gb-sxm")
NUM_MEASURED = 80  # per probe (100 simulated)
PLAN_MEASURED = 40  # per probe of the plans (50 simulated): two plans of 8 configurations in about 5 s of CPU
SLO = Slo(ttft_s=1.0, tpot_s=0.03)
BACKEND = SimulatorBackend(MODEL, WORKLOAD, EngineArgs(
    max_model_len=choose_max_model_len(WORKLOAD, 100, 16, 131072).max_model_len))


def _overloaded_run(early_stop: EarlyStop | None):  # h100-sxm TP1 at twice what it serves
    workload, _ = workload_at_rate(_workload(WORKLOAD), 40.0, 100)
    specs = sample_requests(workload)
    deployment = BACKEND.deployment(Config("h100-sxm", 1, 128), NOMINAL)
    return specs, run_simulation(deployment, workload, SimulationOptions(record_steps=False), specs=specs,
                                 early_stop=early_stop)


def test_floors_never_exceed_the_whole_runs_latencies_and_a_stopped_run_is_its_first_part() -> None:
    specs, whole = _overloaded_run(None)
    req = whole.requests
    outputs = np.array([s.num_output_tokens for s in specs])
    seen: list[tuple[float, tuple[np.ndarray, ...]]] = []

    def record(now_s: float, sent_s: np.ndarray, first_s: np.ndarray, finish_s: np.ndarray) -> bool:
        seen.append((now_s, floors(now_s, sent_s, first_s, finish_s, outputs)))
        return len(seen) == 20

    exact = (req["ttft_s"].to_numpy(), np.nan_to_num(req["tpot_s"].to_numpy(), nan=0.0), req["e2e_s"].to_numpy())
    _, stopped = _overloaded_run(EarlyStop(0.5, 0.1, record))
    assert stopped.stopped_at_s == seen[-1][0] == 0.5 + 19 * 0.1
    for _, values in seen:
        for floor, value in zip(values, exact):
            assert np.all(floor <= value)
    # The stopped run's requests finished by then are the whole run's, to the bit; the others have no finish.
    part = stopped.requests
    done = part["finish_s"].notna().to_numpy()
    assert 0 < done.sum() < len(done) and np.all(part["finish_s"].to_numpy()[done] <= stopped.stopped_at_s)
    for column in ("first_token_s", "finish_s", "ttft_s", "tpot_s"):
        assert np.array_equal(part[column].to_numpy()[done], req[column].to_numpy()[done], equal_nan=True)
    started = part["first_token_s"].notna().to_numpy()
    assert np.array_equal(part["first_token_s"].to_numpy()[started], req["first_token_s"].to_numpy()[started])


def test_an_overloaded_probe_stops_early_and_fails_as_its_whole_run() -> None:
    config = Config("h100-sxm", 1, 128)
    stopped = probe_task((BACKEND, config, NOMINAL, SLO, NUM_MEASURED, 40.0, True)).point
    whole = probe_task((BACKEND, config, NOMINAL, SLO, NUM_MEASURED, 40.0, False)).point
    assert not stopped.complete and whole.complete and not stopped.passes and not whole.passes
    assert stopped.ttft_s <= whole.ttft_s and stopped.ttft_s > SLO.ttft_s
    # A light load passes, and a passing probe always runs to its end.
    light = probe_task((BACKEND, config, NOMINAL, SLO, NUM_MEASURED, 2.0, True)).point
    assert light.passes and light.complete
    specs = sample_requests(workload_at_rate(_workload(WORKLOAD), 40.0, 100)[0])
    stop = slo_early_stop(SLO, specs, measured_slice(100))
    assert stop.first_s == specs[10].arrival_s and stop.every_s == (specs[-1].arrival_s - specs[0].arrival_s) / 50


def test_the_pruned_plan_answers_as_the_exhaustive_one_with_the_real_simulator() -> None:
    def plan(prune: bool) -> planner.Plan:
        request = planner.PlanRequest(model=MODEL, hardware=HARDWARE, workload=WORKLOAD, slo=SLO,
                                      target_rate_per_s=40.0, tensor_parallel_sizes=(1, 2), max_num_seqs=(32, 128),
                                      num_requests=PLAN_MEASURED, prune=prune)
        return planner.make_plan(request, BACKEND, prices_for(HARDWARE, {}), num_workers=1)

    pruned, exhaustive = plan(True), plan(False)

    def answer(p: planner.Plan) -> list[tuple]:
        assert p.best is not None
        return [(c.config, c.num_replicas, c.num_gpus, c.usd_per_hour, c.max_rate_per_s) for c in p.best_per_hardware()] \
            + [(p.best.config, p.best.gpus_range())]

    assert answer(pruned) == answer(exhaustive)
    assert pruned.num_simulations < exhaustive.num_simulations
    probes = [(c.config, s.efficiency, p) for c in pruned.configs for s in (c.nominal, c.pessimistic, c.optimistic)
              if s is not None for p in s.points]
    stopped = [(config, efficiency, p) for config, efficiency, p in probes if not p.complete]
    assert stopped and all(p.complete for c in exhaustive.configs if c.nominal for p in c.nominal.points)
    # Every probe stopped early fails as its whole run does.
    for config, efficiency, p in stopped:
        assert not probe_task((BACKEND, config, efficiency, SLO, PLAN_MEASURED, p.rate_per_s, False)).point.passes
