"""Mooncake traces replayed as workloads (`roofline.sim.traces`).

tests/data/mooncake-conversation-head30.jsonl is the first 30 lines of Mooncake's public conversation trace
(github.com/kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl at 3b5a59413, Apache-2.0; Qin et al.,
FAST'25, appendix A), unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import run_simulation
from roofline.sim.traces import MOONCAKE_BLOCK_TOKENS, read_mooncake_trace, read_trace, trace_cache_ratio
from roofline.sim.workload import RequestFactory, load_workload, sample_requests
from roofline.sim.workload_args import override_workload

EXCERPT = Path(__file__).parent / "data" / "mooncake-conversation-head30.jsonl"


def _lines() -> list[dict]:
    return [json.loads(line) for line in EXCERPT.read_text().splitlines()]


def test_the_excerpt_replays_line_for_line_in_arrival_order() -> None:
    specs = read_mooncake_trace(EXCERPT)
    lines = _lines()
    assert len(specs) == len(lines) == 30
    assert [s.arrival_s for s in specs] == [line["timestamp"] / 1e3 for line in lines]  # already in order, from 0
    assert [(s.num_prompt_tokens, s.num_output_tokens) for s in specs][:2] == [(6758, 500), (7322, 490)]
    assert all(s.block_ids == tuple(line["hash_ids"]) and s.block_tokens == 512 for s, line in zip(specs, lines))
    # through the workload loader, as `--workload FILE.jsonl` reads it; --num-requests and --request-rate apply
    # (the first 20: ten at 0 ms, ten at 3,000 ms, stretched to a mean of 2 per second: the last at 19 / 2 s)
    workload = override_workload(load_workload(EXCERPT), num_requests=20, rate_per_s=2.0)
    assert workload.num_requests == 20
    replayed = sample_requests(workload)
    assert len(replayed) == 20 and replayed[-1].arrival_s == pytest.approx(19 / 2.0)


def test_the_trace_cache_ratio_counts_the_tokens_of_blocks_seen_before() -> None:
    # In these 30 lines only block 0 (the first 512 tokens, a shared system prompt) recurs: 29 requests reuse it.
    lines = _lines()
    assert trace_cache_ratio(read_mooncake_trace(EXCERPT)) == 29 * 512 / sum(line["input_length"] for line in lines)


def test_prompts_are_made_of_their_blocks_so_equal_ids_are_equal_tokens() -> None:
    specs = read_mooncake_trace(EXCERPT)
    factory = RequestFactory(vocab_size=128256, seed=0, bos_token_id=128000, eos_token_id=128001)
    first, second = (factory.prompt_ids(s) for s in specs[:2])
    assert len(first) == 6758 and len(second) == 7322
    assert np.array_equal(first[:MOONCAKE_BLOCK_TOKENS], second[:MOONCAKE_BLOCK_TOKENS])  # block 0 in both
    assert not np.array_equal(first[512:1024], second[512:1024])  # blocks 1 and 14
    again = RequestFactory(vocab_size=128256, seed=0, bos_token_id=128000, eos_token_id=128001)
    assert np.array_equal(again.prompt_ids(specs[1]), second)  # a function of the seed and the block ids
    assert not {128000, 128001} & set(second.tolist())


def test_the_simulated_prefix_cache_hits_the_shared_block() -> None:
    deployment = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs(max_model_len=131072))  # (a 87,169-token prompt)
    result = run_simulation(deployment, load_workload(EXCERPT))
    hits = result.requests["num_prefix_hit_tokens"].to_numpy()
    # A request that arrives after block 0 was computed hits it, in whole 16-token blocks, never beyond it.
    assert hits.max() == MOONCAKE_BLOCK_TOKENS and set(hits.tolist()) <= {0, MOONCAKE_BLOCK_TOKENS}
    assert (hits > 0).sum() >= 15


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
     "line 1: hash_ids: 1 blocks for input_length 600; allowed: ceil(600 / 512) = 2"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1], "user": 3}',
     "line 1: keys hash_ids, input_length, output_length, timestamp, user; allowed: exactly timestamp"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 5, "hash_ids": [1]}', "line 1: timestamp: -1"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [1]}',
     "line 1: output_length: 0 is not allowed; allowed: integers from 1"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [-2]}',
     "line 1: hash_ids: must be a list of integers >= 0"),
    ('{"timestamp": 0, "input_length": 10', "line 1: not a JSON object"),
    ("", "holds no requests"),
])
def test_a_malformed_trace_is_refused_naming_the_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError, match=None) as info:
        read_mooncake_trace(path)
    assert message in str(info.value)


def test_a_window_and_a_speed_replay_part_of_a_trace_faster(tmp_path: Path) -> None:
    from roofline.cli import main

    # The excerpt's clock: ten requests at 0 s, sixteen at 3 s, three at 5.999 s, one at 9 s.
    window = read_mooncake_trace(EXCERPT, window_s=(3.0, 9.0), speed=2.0)
    assert [s.arrival_s for s in window] == [0.0] * 16 + [pytest.approx(2.999 / 2)] * 3  # from 3 s, at 2x
    assert window[0].num_prompt_tokens == 13544  # the first request at 3 s
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n2,10,5\n4,10,5\n")
    assert [s.arrival_s for s in read_trace(csv, window_s=(1.0, 4.0), speed=0.5)] == [0.0, 2.0]
    out = tmp_path / "run"
    assert main(["simulate", "--workload", str(EXCERPT), "--trace-window", "3:9", "--trace-speed", "2",
                 "--max-model-len", "131072", "--out", str(out)]) == 0
    load = json.loads((out / "run.json").read_text())["offered_load"]
    assert load["trace_window_s"] == [3.0, 9.0] and load["trace_speed"] == 2.0
    assert len((out / "requests.csv").read_text().splitlines()) == 1 + 19


@pytest.mark.parametrize("argv, message", [
    (["--trace-window", "9:3"], "--trace-window: '9:3' is not allowed; allowed: 0 <= START < END"),
    (["--trace-window", "3-9"], "--trace-window: '3-9' is not allowed; allowed: START:END in seconds"),
    (["--trace-window", "100:200"], "--trace-window 100:200: no request of"),
    (["--trace-speed", "0"], "--trace-speed: 0.0 is not allowed; allowed: a factor above 0"),
    (["--trace-speed", "2", "--request-rate", "3"], "--trace-speed: not with --request-rate"),
])
def test_bad_trace_replay_flags_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    from roofline.cli import main

    assert main(["simulate", "--workload", str(EXCERPT), "--max-model-len", "131072", *argv]) == 2
    assert message in capsys.readouterr().err


def test_trace_flags_on_a_synthetic_workload_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    assert main(["simulate", "--workload", "sharegpt-chat", "--trace-speed", "2"]) == 2
    assert "--trace-speed: only with a trace" in capsys.readouterr().err


def test_a_trace_longer_than_the_maximum_needs_a_count_or_a_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    # The maximum lowered to 3 (10,000,000 in a test file would take minutes): a 4-row trace is one request over it.
    monkeypatch.setattr("roofline.sim.traces.MAX_NUM_REQUESTS", 3)
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n2,10,5\n4,10,5\n")
    assert main(["simulate", "--workload", str(csv)]) == 2
    assert capsys.readouterr().err == (f"roofline simulate: error: --workload {csv}: 4 requests to replay, more than "
                                       "the 3 one run simulates; allowed: --num-requests up to 3, or a --trace-window "
                                       "holding at most that many\n")
    assert [s.arrival_s for s in read_trace(csv, num_requests=3)] == [0.0, 1.0, 2.0]
    assert [s.arrival_s for s in read_trace(csv, window_s=(1.0, 5.0))] == [0.0, 1.0, 3.0]
