"""roofline.judge.checks: the end-to-end judge's check of a measured row against its stated lengths
(`measured_prefill_load`). Skipped without aiconfigurator-core."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core")

from test_e2e_rows import record  # noqa: E402

from roofline.cost.step_shape import StepArrays  # noqa: E402
from roofline.judge.checks import (  # noqa: E402
    decode_read_floor_s,
    measured_prefill_load,
    prefill_linear_s_per_token,
    repeat_spread,
)
from roofline.judge.rows import SimCase, parse_row, resolve_row  # noqa: E402
from roofline.registry import load_model  # noqa: E402
from roofline.sim.deployment import make_deployment


def test_load_is_the_closed_loops_prompt_tokens_per_second_times_the_time_per_token() -> None:
    # 10 clients, requests of mean 0.9 s (TTFT 0.1 s + (mean osl 90 - 1) x ~9 ms); mean prompt 900 tokens
    # (lengths in [800, 1000]); 1 ms of GEMMs per prompt token -> 10 / 0.9 x 900 x 1e-3 = 10x the wall time.
    frame = pd.DataFrame({"isl": [1000], "osl": [100], "concurrency": [10], "measured_ttft_s": [0.1],
                          "measured_tpot_s": [0.8 / 89.0], "prefill_linear_s_per_token": [1e-3]})
    assert measured_prefill_load(frame)[0] == pytest.approx(10.0)


def test_prefill_linear_time_is_positive_and_below_the_whole_prefill_step() -> None:
    row = parse_row(record(isl=4096, tp_size=2.0, batch_size=4.0, silicon_data_source="silicon_concurrency=4"))
    case = resolve_row(row)
    assert isinstance(case, SimCase)
    deployment = make_deployment(load_model(case.config_path), case.hardware_id, case.engine)
    per_token = prefill_linear_s_per_token(deployment, row)
    one = np.ones(1, dtype=np.int64)
    step = deployment.cost_model.cost(StepArrays(one * 4096, one * 4096, one))
    assert 0.5 * step.total_s / 4096 < per_token < step.total_s / 4096


def test_decode_floor_reads_at_least_the_weights_and_grows_with_the_batch() -> None:
    row = parse_row(record())
    case = resolve_row(row)
    assert isinstance(case, SimCase)
    deployment = make_deployment(load_model(case.config_path), case.hardware_id, case.engine)
    floor_16 = decode_read_floor_s(deployment, row, None)
    floor_4 = decode_read_floor_s(deployment, row, 4.0)
    weights_per_gpu = 70.6e9 / 4  # Llama-3.1-70B in fp8, one byte a weight, on 4 GPUs
    assert weights_per_gpu / deployment.hw.memory_bandwidth_bytes_per_s < floor_4 < floor_16


def test_repeat_spread_counts_configurations_measured_twice_and_ignores_copies() -> None:
    a = parse_row(record(id="a", silicon_ttft_ms=100.0, silicon_tpot_ms=10.0))
    b = parse_row(record(id="b", silicon_ttft_ms=110.0, silicon_tpot_ms=10.0))
    copy = parse_row(record(id="c", silicon_ttft_ms=100.0 + 1e-12, silicon_tpot_ms=10.0))
    other = parse_row(record(id="d", isl=2048, silicon_ttft_ms=300.0, silicon_tpot_ms=12.0))
    spread = repeat_spread([a, b, copy, other])
    assert spread["all"]["groups"] == 1 and spread["h100_sxm"]["groups"] == 1
    assert spread["all"]["ttft_median"] == pytest.approx(0.10) and spread["all"]["tpot_median"] == 0.0
    assert repeat_spread([a, copy, other]) == {}
