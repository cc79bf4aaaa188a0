"""CSV traces of the public production formats (`roofline.sim.trace_csv`): Azure's LLM inference traces and BurstGPT.

tests/data/azure-llm-conv-2023-head20.csv is the header and first 20 rows of Azure's 2023 conversation trace
(github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_conv.csv at b469a113ced, CC-BY 4.0; Patel et al.,
"Splitwise", ISCA'24), unchanged. AZURE_2024 is the first five rows of the 2024 week-long code trace as the dataset's
own notebook prints them (analysis/AzureLLMInferenceDataset2024.ipynb at b469a113ced; the file is on Azure blob
storage, not in the repository) plus the whole-second form its comment names ("2024-05-12 00:00:00+00:00").
BURSTGPT is the first three rows of BurstGPT_1.csv (github.com/HPMLL/BurstGPT, CC-BY 4.0; the file is a Git LFS
object, absent from the snapshot read here) as quoted by the input example of ai-dynamo/dynamo's
benchmarks/burstgpt_loadgen converter; the header is the README's schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.errors import UserError
from roofline.sim.traces import read_trace, trace_rows
from roofline.sim.workload import load_workload, sample_requests
from roofline.sim.workload_args import with_trace_replay

AZURE_2023 = Path(__file__).parent / "data" / "azure-llm-conv-2023-head20.csv"
AZURE_2024 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2024-05-10 00:00:00.009930+00:00,2162,5\n"
              "2024-05-10 00:00:00.017335+00:00,2399,6\n"
              "2024-05-10 00:00:00.022314+00:00,76,15\n"
              "2024-05-10 00:00:00.037845+00:00,2376,1\n"
              "2024-05-10 00:00:00.083890+00:00,7670,8\n")
BURSTGPT_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURSTGPT = BURSTGPT_HEAD + ("5,ChatGPT,472,18,490,Conversation log\n"
                            "45,ChatGPT,1087,230,1317,Conversation log\n"
                            "118,GPT-4,417,276,693,Conversation log\n")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_azure_2023_excerpt_replays_row_for_row() -> None:
    rows = trace_rows(AZURE_2023)
    assert rows.format == "azure" and len(rows) == 20 and rows.num_left_out == 0
    specs = sample_requests(load_workload(AZURE_2023))
    assert len(specs) == 20
    # 18:15:46.6805900 -> 18:15:50.9951690 -> 18:15:59.7056780 (the 20th)
    assert specs[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert specs[-1].arrival_s == pytest.approx(13.025088, abs=1e-9)
    assert [(s.num_prompt_tokens, s.num_output_tokens) for s in specs[:3]] == [(374, 44), (396, 109), (879, 55)]
    assert (specs[-1].num_prompt_tokens, specs[-1].num_output_tokens) == (1353, 142)


def test_azure_window_and_speed_slice_the_trace_clock() -> None:
    # [4.5, 9) s of the excerpt's clock (from 18:15:46.6805900): rows 3 (18:15:51.2224670, 4.541877 s) to 10
    # (18:15:55.1455750, 8.464985 s; row 11 at 8.700213 s... is inside too? no: 18:15:55.3808030 is 8.700213 s)
    specs = read_trace(AZURE_2023, window_s=(4.5, 9.0), speed=2.0)
    assert [s.num_prompt_tokens for s in specs] == [879, 91, 91, 381, 1313, 388, 242, 209, 394]
    assert specs[0].arrival_s == pytest.approx((4.541877 - 4.5) / 2, abs=1e-9)  # from the window's start, at 2x
    assert specs[-1].arrival_s == pytest.approx((8.700213 - 4.5) / 2, abs=1e-9)


def test_azure_2024_timestamps_with_an_offset_and_whole_seconds(tmp_path: Path) -> None:
    path = write(tmp_path, "code-1week.csv", AZURE_2024 + "2024-05-10 00:00:01+00:00,100,2\n")
    specs = read_trace(path)
    assert [s.arrival_s for s in specs] == pytest.approx([0.0, 0.007405, 0.012384, 0.027915, 0.07396, 0.99007],
                                                         abs=1e-9)
    assert [(s.num_prompt_tokens, s.num_output_tokens) for s in specs[:2]] == [(2162, 5), (2399, 6)]


def test_burstgpt_rows_replay_from_the_first_timestamp(tmp_path: Path) -> None:
    rows = trace_rows(write(tmp_path, "BurstGPT_1.csv", BURSTGPT))
    assert rows.format == "burstgpt"
    specs = read_trace(write(tmp_path, "b.csv", BURSTGPT))
    assert [(s.arrival_s, s.num_prompt_tokens, s.num_output_tokens) for s in specs] == [
        (0.0, 472, 18), (40.0, 1087, 230), (113.0, 417, 276)]


def test_burstgpt_3_columns_are_read_by_name(tmp_path: Path) -> None:
    # BurstGPT_3 inserts Session ID and Elapsed time after Timestamp (the README's schema); values made up here.
    text = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,a1,2.5,ChatGPT,472,18,490,Conversation log\n7,,1.0,GPT-4,30,4,34,API log\n")
    specs = read_trace(write(tmp_path, "BurstGPT_3.csv", text))
    assert [(s.arrival_s, s.num_prompt_tokens, s.num_output_tokens) for s in specs] == [(0.0, 472, 18), (2.0, 30, 4)]


def test_failed_requests_are_left_out_and_counted(tmp_path: Path) -> None:
    # Made-up rows after the cited ones: a failure as BurstGPT_1.csv records one (Response tokens 0) and an empty
    # prompt, left out, counted, and named in the offered load that `simulate` prints.
    path = write(tmp_path, "b.csv", BURSTGPT + "120,GPT-4,300,0,300,API log\n130,ChatGPT,0,0,0,API log\n")
    rows = trace_rows(path)
    assert len(rows) == 3 and rows.num_left_out == 2
    assert rows.left_out_reason == "2 rows with 0 Request tokens or 0 Response tokens (failed requests)"
    assert load_workload(path).num_requests == 3


def test_unsorted_rows_replay_in_arrival_order(tmp_path: Path) -> None:
    text = BURSTGPT_HEAD + "45,ChatGPT,1087,230,1317,Conversation log\n5,ChatGPT,472,18,490,Conversation log\n"
    specs = read_trace(write(tmp_path, "b.csv", text))
    assert [(s.arrival_s, s.num_prompt_tokens) for s in specs] == [(0.0, 472), (40.0, 1087)]


@pytest.mark.parametrize("text, message", [
    (BURSTGPT + "120,GPT-4,-3,5,2,API log\n",
     "line 5 column Request tokens: -3 is not allowed; allowed: integers from 0 to 10,000,000"),
    (BURSTGPT + "120,GPT-4,30,2.5,32.5,API log\n", "line 5 column Response tokens: 2.5 is not allowed"),
    (BURSTGPT + "-1,GPT-4,30,2,32,API log\n", "line 5 column Timestamp: -1 is not allowed; allowed: seconds"),
    (BURSTGPT + "soon,GPT-4,30,2,32,API log\n", "line 5 column Timestamp: 'soon' is not allowed"),
    (BURSTGPT + "130,GPT-4,,2,32,API log\n", "line 5 column Request tokens: '' is not allowed"),
    (AZURE_2024 + "2024-05-10 25:00:00+00:00,10,1\n", "line 7 column TIMESTAMP: '2024-05-10 25:00:00+00:00'"),
    (AZURE_2024 + "2024-05-10 00:00:01+00:00,10,-1\n", "line 7 column GeneratedTokens: -1 is not allowed"),
    ("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,1,1\n",
     "must have columns of a trace format (csv: arrival_s,prompt_tokens,output_tokens; azure: TIMESTAMP,"
     "ContextTokens,GeneratedTokens; burstgpt: Timestamp,Model,Request tokens,Response tokens,Total tokens,Log "
     "Type); found Timestamp,Model,Request tokens,Response tokens"),
    (BURSTGPT_HEAD + "120,GPT-4,30,0,30,API log\n", "holds no served request: every row has 0 Request tokens"),
    (BURSTGPT_HEAD, "holds no requests"),
])
def test_a_bad_row_is_named_by_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "t.csv", text)
    with pytest.raises(UserError) as info:
        read_trace(path)
    assert message in str(info.value) and f"'{path}'" in str(info.value)
    assert "\n" not in str(info.value)


def test_simulate_replays_a_burstgpt_file_and_says_what_it_left_out(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    path = write(tmp_path, "b.csv", BURSTGPT + "120,GPT-4,300,0,300,API log\n")
    out = tmp_path / "run"
    assert main(["simulate", "--workload", str(path), "--trace-speed", "10", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "trace_format burstgpt" in printed and "left_out 1 rows with 0 Request tokens" in printed
    load = json.loads((out / "run.json").read_text())["offered_load"]
    assert load["trace_format"] == "burstgpt" and load["trace_speed"] == 10.0
    arrivals = [float(line.split(",")[2]) for line in (out / "requests.csv").read_text().splitlines()[1:]]
    assert arrivals == [0.0, 4.0, 11.3]


def test_the_busiest_window_is_the_stretch_with_the_most_arrivals(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cli import main

    # The excerpt's busiest 2 s hold 7 requests, from 18:15:54.4260870 (7.745497 s of its clock) to 18:15:55.5826
    # (8.2514 ... 9.5826 s); the next-best start (8.2514 s) holds 7 too, the earliest is taken.
    out = tmp_path / "run"
    assert main(["simulate", "--workload", str(AZURE_2023), "--trace-window", "busiest:2", "--out", str(out)]) == 0
    load = json.loads((out / "run.json").read_text())["offered_load"]
    assert load["trace_window_s"] == [pytest.approx(7.745497), pytest.approx(9.745497)]
    assert len((out / "requests.csv").read_text().splitlines()) == 1 + 7
    assert "trace_window_s [7.745497" in capsys.readouterr().out
    # longer than the trace: all of it, from 0
    specs = sample_requests(with_trace_replay(load_workload(AZURE_2023), "busiest:3600", None, False))
    assert len(specs) == 20 and specs[-1].arrival_s == pytest.approx(13.025088)


@pytest.mark.parametrize("window, message", [
    ("busiest:0", "allowed: busiest:SECONDS with SECONDS > 0"),
    ("busiest:hour", "allowed: START:END in seconds (e.g. 3600:7200) or busiest:SECONDS"),
])
def test_a_bad_busiest_window_is_one_line(window: str, message: str) -> None:
    with pytest.raises(UserError, match=None) as info:
        with_trace_replay(load_workload(AZURE_2023), window, None, False)
    assert message in str(info.value)
