"""Workload YAML parsing, sampling of arrivals and lengths, CSV trace replay and the shared CLI flags."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

from engine.core.request import Request, SamplingParams
from roofline.errors import UserError
from roofline.registry import list_ids
from roofline.sim.traces import read_trace
from roofline.sim.workload import (
    ArrivalProcess,
    KeptPrompts,
    LengthDistribution,
    PromptStream,
    RequestFactory,
    load_workload,
    sample_requests,
)
from roofline.sim.workload_args import add_workload_args, workload_from_args

SHIPPED = ("sharegpt-chat", "long-summarization", "code-completion", "offline-batch", "multi-turn-chat")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_workload_args(parser)
    return parser.parse_args(argv)


BASIC = """
name: basic
seed: 3
num_requests: 50
arrival: {process: poisson, rate_per_s: 10}
prompt_tokens: {distribution: uniform, min: 10, max: 20}
output_tokens: {distribution: fixed, value: 7}
"""


@pytest.mark.parametrize("workload_id", SHIPPED)
def test_shipped_workloads_load_and_sample(workload_id: str) -> None:
    assert workload_id in list_ids("workload")
    specs = sample_requests(load_workload(workload_id))
    assert len(specs) == load_workload(workload_id).num_requests
    arrivals = [s.arrival_s for s in specs]
    assert arrivals == sorted(arrivals)
    assert all(s.num_prompt_tokens >= 1 and s.num_output_tokens >= 1 for s in specs)


def test_same_seed_same_requests_other_seed_differs(tmp_path: Path) -> None:
    path = write(tmp_path, "w.yaml", BASIC)
    assert sample_requests(load_workload(path)) == sample_requests(load_workload(path))
    other = workload_from_args(parse(["--workload", str(path), "--seed", "4"]))
    assert sample_requests(other) != sample_requests(load_workload(path))


def test_uniform_and_fixed_lengths_respected(tmp_path: Path) -> None:
    specs = sample_requests(load_workload(write(tmp_path, "w.yaml", BASIC)))
    assert {s.num_output_tokens for s in specs} == {7}
    assert min(s.num_prompt_tokens for s in specs) >= 10 and max(s.num_prompt_tokens for s in specs) <= 20


def test_poisson_mean_gap_matches_rate() -> None:
    times = ArrivalProcess("poisson", rate_per_s=5.0).sample(np.random.default_rng(0), 20001)
    assert times[0] == 0.0
    assert np.diff(times).mean() == pytest.approx(0.2, rel=0.03)


def test_gamma_gaps_have_requested_cv() -> None:
    gaps = np.diff(ArrivalProcess("gamma", rate_per_s=2.0, cv=3.0).sample(np.random.default_rng(1), 50001))
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.08)


def test_constant_burst_and_all_at_once_arrivals() -> None:
    rng = np.random.default_rng(0)
    assert ArrivalProcess("constant", rate_per_s=4.0).sample(rng, 4).tolist() == [0.0, 0.25, 0.5, 0.75]
    assert ArrivalProcess("burst", rate_per_s=4.0, burst_size=2).sample(rng, 5).tolist() == [0, 0, 0.5, 0.5, 1.0]
    assert ArrivalProcess("all_at_once").sample(rng, 3).tolist() == [0.0, 0.0, 0.0]
    assert ArrivalProcess("poisson", rate_per_s=math.inf).sample(rng, 2).tolist() == [0.0, 0.0]


def test_lognormal_and_normal_clip_to_bounds() -> None:
    rng = np.random.default_rng(0)
    x = LengthDistribution("lognormal", mean_log=5.0, std_log=2.0, min_tokens=8, max_tokens=100).sample(rng, 1000)
    assert x.min() == 8 and x.max() == 100
    y = LengthDistribution("normal", mean=10.0, std=50.0, min_tokens=1).sample(rng, 1000)
    assert y.min() == 1


def test_empirical_histogram_samples_inside_bins(tmp_path: Path) -> None:
    write(tmp_path, "h.csv", "min_tokens,max_tokens,count\n10,19,1\n100,100,3\n")
    path = write(tmp_path, "w.yaml", BASIC.replace("{distribution: uniform, min: 10, max: 20}",
                                                   "{distribution: empirical, csv: h.csv}"))
    workload = load_workload(path)
    lengths = workload.prompt_tokens.sample(np.random.default_rng(0), 4000)
    assert set(lengths.tolist()) <= set(range(10, 20)) | {100}
    assert (lengths == 100).mean() == pytest.approx(0.75, abs=0.03)


def test_shared_prefix_groups_round_robin(tmp_path: Path) -> None:
    text = BASIC + "shared_prefix: {num_groups: 3, prefix_tokens: 32}\n"
    specs = sorted(sample_requests(load_workload(write(tmp_path, "w.yaml", text))), key=lambda s: int(s.request_id[1:]))
    assert [s.prefix_group for s in specs[:4]] == [0, 1, 2, 0]
    assert all(s.num_prompt_tokens > 32 for s in specs)


def test_multi_turn_prompt_extends_previous_turn(tmp_path: Path) -> None:
    text = BASIC + "sessions:\n  num_turns: {distribution: fixed, value: 3}\n  think_time_s: 5\n"
    specs = sample_requests(load_workload(write(tmp_path, "w.yaml", text)))
    session = sorted((s for s in specs if s.session_id == 0), key=lambda s: s.turn)
    assert [s.turn for s in session] == [0, 1, 2]
    for earlier, later in zip(session, session[1:]):
        assert later.num_prompt_tokens > earlier.num_prompt_tokens + earlier.num_output_tokens
        assert later.arrival_s >= earlier.arrival_s
    assert len(specs) == 50


@pytest.mark.parametrize("text, message", [
    (BASIC + "colour: red\n", "unknown field 'colour'"),
    (BASIC.replace("poisson", "weibull"), "process: 'weibull' is not allowed"),
    (BASIC.replace("rate_per_s: 10", "rate_per_s: -1"), "rate_per_s: must be > 0"),
    (BASIC.replace("distribution: fixed", "distribution: zipf"), "distribution: 'zipf' is not allowed"),
    (BASIC.replace("value: 7", "valu: 7"), "unknown field 'valu'"),
    (BASIC.replace("name: basic\n", ""), "missing field 'name'"),
    ("name: x\narrival: [1, 2\n", "malformed YAML"),
    (BASIC + "name: again\n", "malformed YAML at line .*duplicate key 'name'"),  # not silently the last one
])
def test_bad_yaml_is_one_line_user_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        load_workload(write(tmp_path, "w.yaml", text))
    assert "\n" not in str(info.value)


def test_trace_replay_our_columns_in_arrival_order(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n2.0,10,3\n1.0,20,4\n1.5,30,5\n")
    specs = read_trace(path)
    assert [(s.arrival_s, s.num_prompt_tokens, s.num_output_tokens) for s in specs] == [
        (0.0, 20, 4), (0.5, 30, 5), (1.0, 10, 3)]


def test_trace_replay_azure_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    specs = load_workload(path)
    got = sample_requests(specs)
    assert got[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert (got[0].num_prompt_tokens, got[0].num_output_tokens) == (374, 44)


def test_trace_rate_rescales_time(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n10,1,1\n20,1,1\n")
    specs = sample_requests(workload_from_args(parse(["--workload", str(path), "--request-rate", "1"])))
    assert [s.arrival_s for s in specs] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("text, message", [
    ("a,b\n1,2\n", "must have columns"),
    ("arrival_s,prompt_tokens,output_tokens\n0,0,1\n", "line 2"),
    ("arrival_s,prompt_tokens,output_tokens\n0,x,1\n", "line 2 column prompt_tokens"),
])
def test_bad_trace_is_user_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        read_trace(write(tmp_path, "t.csv", text))


def test_fixed_length_flags_make_synthetic_workload() -> None:
    workload = workload_from_args(parse(["--input-len", "128", "--output-len", "16", "--num-requests", "5",
                                         "--request-rate", "inf"]))
    specs = sample_requests(workload)
    assert [(s.arrival_s, s.num_prompt_tokens, s.num_output_tokens) for s in specs] == [(0.0, 128, 16)] * 5


def test_flags_override_workload_file() -> None:
    workload = workload_from_args(parse(["--workload", "sharegpt-chat", "--num-requests", "7", "--output-len", "9",
                                         "--request-rate", "2.5"]))
    assert workload.num_requests == 7 and workload.arrival.rate_per_s == 2.5
    assert {s.num_output_tokens for s in sample_requests(workload)} == {9}


@pytest.mark.parametrize("argv, message", [
    (["--request-rate", "-3"], "--request-rate"),
    (["--request-rate", "fast"], "--request-rate"),
    (["--num-requests", "0"], "--num-requests"),
    (["--input-len", "5"], "give both"),
    (["--workload", "no-such-workload"], "unknown workload"),
])
def test_bad_flags_are_user_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        workload_from_args(parse(argv))


def test_prompt_stream_gives_the_ids_of_eager_requests_in_any_order_of_asking(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's lazy prompts (`PromptStream`, `Request.lazy`): asked for out of spec order (a later request
    scheduled first on another replica), every prompt still has the ids `RequestFactory` gives in spec order, for
    unique prompts, shared prefixes and multi-turn sessions."""
    for name in ("sharegpt-chat", "multi-turn-chat", "code-completion"):
        workload = load_workload(name)
        specs = sample_requests(workload)[:40]
        prefix = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
        make = RequestFactory(32000, workload.seed, 1, 2)
        eager = [make(s, prefix) for s in specs]
        factory = RequestFactory(32000, workload.seed, 1, 2)
        stream = PromptStream(factory, specs, prefix)
        lazy = [factory.lazy(s, stream.source(i), s.arrival_s) for i, s in enumerate(specs)]
        assert all(r._prompt is None for r in lazy)  # nothing made before it is read
        for i in [5, 0, 39, 6, *range(1, 5), *range(7, 39)]:
            assert np.array_equal(lazy[i].prompt_array, eager[i].prompt_array), (name, i)
            assert lazy[i].num_prompt_tokens == eager[i].num_prompt_tokens
            assert lazy[i].token_ids(0, 3) == eager[i].token_ids(0, 3)
        assert not stream._made  # each made prompt was handed to its request
        kept = KeptPrompts(workload, specs, 32000, 1, 2)  # made at once (`roofline simulate --intervals`)
        for i in (39, 0, 5):
            request = factory.lazy(specs[i], kept.source(i), specs[i].arrival_s)
            assert np.array_equal(request.prompt_array, eager[i].prompt_array), (name, i)
            assert not request.prompt_array.flags.writeable
    specs = sample_requests(load_workload("sharegpt-chat"))
    total = sum(s.num_prompt_tokens for s in specs)
    monkeypatch.setattr(KeptPrompts, "MAX_TOKENS", total)
    assert KeptPrompts.kept(load_workload("sharegpt-chat"), specs, 32000) is not None
    monkeypatch.setattr(KeptPrompts, "MAX_TOKENS", total - 1)
    assert KeptPrompts.kept(load_workload("sharegpt-chat"), specs, 32000) is None  # over the bound: not kept


def test_lazy_request_refuses_a_source_of_the_wrong_length() -> None:
    req = Request.lazy("r", 3, lambda: np.arange(4), SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="gave \\(4,\\) ids"):
        req.prompt_array
    with pytest.raises(ValueError, match="num_prompt_tokens must be a positive integer"):
        Request.lazy("r", 0, lambda: np.arange(1), SamplingParams())
