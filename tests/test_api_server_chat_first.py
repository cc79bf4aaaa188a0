"""The chat endpoint's work after a request's hand-off to the engine core (roofline.sim.api_server,
`ApiServerCosts.chat_first_output_s`): charged in the output pass of the step that streams the request's first token
(vLLM's role chunk), not on the way in; a host profile states it like its other measured costs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from api_costs import only
from profiles import gpu_profile_without_tokenizer

from roofline.cost.hardware import parse_profile
from roofline.cost.host_cpu import HostCpu
from roofline.cost.profile_yaml import read_profile_dict
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.registry import resolve
from roofline.sim.api_server import ApiServer, ApiServerCosts
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

ENGINE = EngineArgs(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=512, num_gpu_blocks_override=400,
                    async_scheduling=False)
STEP_S = 0.01
BASE = only(request_s=0.02, output_pass_s=0.001, output_token_s=0.002)


def _run(workload: Workload, costs: ApiServerCosts, **options):  # noqa: ANN003, ANN202
    hw = replace(gpu_profile_without_tokenizer("h100-sxm"), host=HostCpu("test host", 1.0,
                                                                         api_server_before_render_fraction=0.0))
    return run_simulation(make_deployment("llama-156m", hw, ENGINE),
                          workload, SimulationOptions(api_server_costs=costs, **options),
                          step_time_fn=lambda replica, step, start, plan: STEP_S)


def _workload(n: int, output: int, arrival: ArrivalProcess) -> Workload:
    return Workload(name="w", seed=0, num_requests=n, arrival=arrival,
                    prompt_tokens=LengthDistribution("fixed", value=16),
                    output_tokens=LengthDistribution("fixed", value=output))


def test_a_first_output_adds_its_cost_to_its_pass_on_the_chat_endpoint_only() -> None:
    """A pass of 3 tokens, 2 of them their requests' first: 1 + 3 x 2 ms, plus 2 x 5 ms on the chat endpoint."""
    costs = replace(BASE, chat_first_output_s=0.005)
    assert ApiServer(costs, endpoint="chat").stream_outputs(1.0, 0, 3, 2) == pytest.approx(1.017, abs=1e-12)
    assert ApiServer(costs, endpoint="chat").stream_outputs(1.0, 0, 3) == pytest.approx(1.007, abs=1e-12)
    assert ApiServer(costs).stream_outputs(1.0, 0, 3, 2) == pytest.approx(1.007, abs=1e-12)


@pytest.mark.parametrize("num_processes", [1, 2])
def test_the_chat_first_output_cost_is_charged_after_the_hand_off(num_processes: int) -> None:
    """One request at a time (every 100 ms), 3 output tokens: with chat_first_output_s 5 ms each request reaches the
    engine when it does without it (20 ms after its send) and its first token is seen 5 ms later; its other tokens'
    passes are unchanged (its last token seen as before). The same 5 ms as chat_request_s is on the way in: it reaches
    5 ms later. The completions endpoint pays none."""
    paced = _workload(4, 3, ArrivalProcess("constant", 10.0))
    options = {"endpoint": "chat", "api_server_count": num_processes}
    bare = _run(paced, BASE, **options).requests
    after = _run(paced, replace(BASE, chat_first_output_s=0.005), **options).requests
    before = _run(paced, replace(BASE, chat_request_s=0.005), **options).requests
    assert np.allclose(bare.first_scheduled_s - bare.arrival_s, 0.02, rtol=0, atol=1e-12)
    assert np.array_equal(after.first_scheduled_s, bare.first_scheduled_s)
    assert np.allclose(after.ttft_s - bare.ttft_s, 0.005, rtol=0, atol=1e-12)
    assert np.allclose(after.e2e_s, bare.e2e_s, rtol=0, atol=1e-12)
    assert np.allclose(before.first_scheduled_s - bare.first_scheduled_s, 0.005, rtol=0, atol=1e-12)
    completions = _run(paced, replace(BASE, chat_first_output_s=0.005), api_server_count=num_processes).requests
    assert np.array_equal(completions.ttft_s, bare.ttft_s)


def test_a_burst_pays_each_first_output_in_the_pass_of_its_prompt_step() -> None:
    """A burst of 3 (20 ms of input work each, a 10-ms step each): request k's first token is in step k's pass with
    one first output: 5 ms more than without. The passes go first on the loop, so the intake behind each waits 5 ms
    more: request k reaches the engine 5 k ms later than without, and its first token is seen 5 (k + 1) ms later."""
    burst = _workload(3, 2, ArrivalProcess("all_at_once"))
    bare = _run(burst, BASE, endpoint="chat").requests
    after = _run(burst, replace(BASE, chat_first_output_s=0.005), endpoint="chat").requests
    assert np.allclose(after.first_scheduled_s - bare.first_scheduled_s, [0.0, 0.005, 0.010], rtol=0, atol=1e-12)
    assert np.allclose(after.ttft_s - bare.ttft_s, [0.005, 0.010, 0.015], rtol=0, atol=1e-12)


def test_a_host_profile_states_the_chat_first_output_cost() -> None:
    host = HostCpu.from_dict({"cpu_model": "x", "single_thread_speed_relative": 2.0,
                              "api_server_costs_s": {"chat_first_output": 4e-4}}, "p.yaml: host")
    costs = ApiServerCosts.for_host(host)
    assert costs.chat_first_output_s == 4e-4  # as measured on the host, not scaled by its speed
    assert costs.chat_request_s == ApiServerCosts().chat_request_s / 2.0
    data = read_profile_dict(resolve("hardware", "h100-sxm"))
    bad = {"cpu_model": "x", "single_thread_speed_relative": 1, "api_server_costs_s": {"chat_first_output": -1e-4}}
    with pytest.raises(UserError, match=r"^p\.yaml: host\.api_server_costs_s\.chat_first_output: must be seconds in "
                                        r"\[0, 1\], got -0\.0001$"):
        parse_profile({**data, "host": bad}, "p.yaml")
