"""CLI basics: `roofline profiles` / `models` list what is shipped; bad input is one line on stderr and exit 2;
the torch-free commands never import torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.registry import list_ids


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_profiles_table_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "bf16 TFLOP/s" in out.splitlines()[0]
    assert all(f"\n{pid} " in out for pid in list_ids("hardware"))
    assert "989.4" in out and "nvlink4 450/dir x8" in out


def test_profiles_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(list_ids("hardware"))
    assert rows["h100-sxm"]["peak_tflops"]["fp8"] == 1978.9
    assert rows["l4"]["interconnect"] is None


def test_models_table_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{mid} " in out for mid in list_ids("model"))
    assert "8.03B" in out and "46.7B" in out


def test_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["llama-3.1-8b"]["num_params"] == 8_030_261_248
    assert rows["mixtral-8x7b"]["num_experts"] == 8
    # the issue-39 columns: KV bytes per token (32 layers x K, V x 8 heads x 128 x 2 bytes), quantization, fitted
    assert rows["llama-3.1-8b"]["kv_bytes_per_token_16bit"] == 32 * 2 * 8 * 128 * 2
    assert rows["llama-3.1-8b"]["hf_id"] == "meta-llama/Llama-3.1-8B"
    assert "meta-llama/llama-3.1-8b-instruct" in rows["llama-3.1-8b"]["also_hf_ids"]
    assert (rows["gpt-oss-120b"]["quantization"], rows["gpt-oss-120b"]["fitted"]) == \
        ("attention bf16, experts mxfp4", "tables")
    assert rows["qwen2.5-7b-instruct-awq"]["fitted"] == "no: AWQ int4 (Marlin)"
    assert rows["gemma-3-27b"]["attention"] == "52 sliding (1024) + 10 full"
    assert rows["glm-4.5"]["num_active_params"] < rows["glm-4.5"]["num_params"] / 10


def test_profile_device_without_torch_says_install_engine_extra(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    assert main(["profile-device", "--quick"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "install the engine extra: pip install -e '.[engine]'" in line


def test_profile_device_cuda_without_cuda_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["profile-device", "--device", "cuda", "--quick"]) == 2
    assert "cuda is not available" in _one_error_line(capsys.readouterr().err)


def test_bad_flag_value_exits_2_with_one_line_and_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-m", "roofline", "profile-device", "--threads", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    expected = "roofline profile-device: error: --threads: must be a positive integer, got 0"
    assert _one_error_line(proc.stderr) == expected


def test_cli_and_listing_commands_never_import_torch() -> None:
    code = ("import sys; from roofline.cli import build_parser, main; build_parser(); "
            "main(['profiles']); main(['models']); "
            "import roofline.cost.hardware, roofline.commands.profile_device; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("argv,needle", [
    (["simulate", "--moe-backend", "cutlass"], "--moe-backend: invalid choice: 'cutlass'"),
    (["simulate", "--num-requests", "x"], "invalid int value: 'x'"),
    (["simulate", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
])
def test_a_flag_argparse_refuses_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                        needle: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert needle in line and line.startswith("roofline") and "--help" in line


@pytest.mark.parametrize("argv, command", [
    (["simulate", "--num-requests", "3"], "simulate"),
    (["profile-device", "--help"], "profile-device"),
    (["--version"], None),
    (["--help", "simulate"], None),  # an option before the command: the whole parser
    (["simulat"], None),  # a misspelt command: argparse lists every command
    (["predict_ops"], None),  # the module's name, not the command's
    ([], None),
])
def test_a_named_command_builds_its_parser_alone(argv: list[str], command: str | None) -> None:
    from roofline.cli import _named_command

    assert _named_command(argv) == command


@pytest.mark.parametrize("argv, environ, limited", [
    (["simulate", "--num-requests", "3"], {}, True),
    (["plan", "--help"], {"PATH": "/bin"}, True),
    (["simulate"], {"OPENBLAS_NUM_THREADS": "4"}, False),  # the user's choice stands
    (["simulate"], {"OMP_NUM_THREADS": "8"}, False),  # OpenBLAS reads it when its own is not set
    (["measure", "--model", "llama-tiny"], {}, False),  # torch's threads: not ours to set
    (["profile-device"], {}, False),
    (["--version"], {}, False),  # no command: numpy never imported
])
def test_a_torch_free_command_runs_one_blas_thread_unless_the_user_chose(argv: list[str], environ: dict[str, str],
                                                                          limited: bool) -> None:
    from roofline.cli import _one_blas_thread

    before = dict(environ)
    assert _one_blas_thread(argv, environ) is limited
    assert environ == ({**before, "OPENBLAS_NUM_THREADS": "1"} if limited else before)


def test_the_process_loads_openblas_with_one_thread() -> None:
    # The console script's own process: numpy's OpenBLAS reads the variable once, when it loads (after `entry` set it).
    code = ("import os, sys; sys.argv = ['roofline', 'simulate', '--num-requests', '2', '--json']; "
            "import roofline.cli as cli; cli.main = lambda freeze_imports=False: print(os.environ.get("
            "'OPENBLAS_NUM_THREADS')) or 0; cli.entry()")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "1", (proc.returncode, proc.stdout, proc.stderr)


def test_simulate_imports_no_other_commands_modules() -> None:
    # `roofline simulate` builds only its own parser: calibrate's plots (matplotlib), the planner and Parquet's
    # writer (only for --out) stay unimported, most of the process's start before (BENCHMARKS.md, Simulator speed).
    code = ("import sys; from roofline.cli import main; "
            "assert main(['simulate', '--num-requests', '2', '--json']) == 0; "
            "loaded = [m for m in ('matplotlib', 'scipy', 'roofline.calibration', 'roofline.planning', "
            "'roofline.commands.plan', 'pyarrow.parquet', 'roofline.sim.outputs') if m in sys.modules]; "
            "assert not loaded, loaded")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_simulate_out_imports_no_pyarrow_where_a_child_writes() -> None:
    # `--out` where the platform forks: steps.parquet is written by a child process, which imports pyarrow; the
    # simulation's process does not (~0.06 s of CPU and ~50 MB: 2026-11-30i-outspeed.md).
    code = ("import sys, tempfile, contextlib, io; from roofline.cli import main; from roofline.sim import outputs\n"
            "with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['simulate', '--num-requests', '20', '--out', out + '/o']) == 0\n"
            "loaded = [m for m in ('pyarrow', 'pandas', 'roofline.sim.steps_file') if m in sys.modules]\n"
            "assert not loaded or not outputs.FORKED, loaded")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_simulates_printout_help_and_refusals_import_no_pandas(tmp_path: Path) -> None:
    # The printout reads the tables' numpy columns (roofline.sim.table): pandas and the pyarrow it imports (~0.25-0.45 s
    # of the process's start) only for a CSV trace or a command that needs DataFrames; --out imports pyarrow alone, and
    # the --help of commands whose runs read traces or CSVs imports neither.
    code = ("import sys, contextlib, io; from roofline.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    assert main(['simulate', '--num-requests', '30', '--verbose', '--slo-ttft-s', '0.2', "
            "'--slo-tpot-s', '0.02', '--goodput', 'ttft:200']) == 0\n"
            "    assert main(['simulate', '--num-requests', '20', '--workload', 'multi-turn-chat', '--json']) == 0\n"
            "    assert main(['simulate', '--num-requests', '0']) == 2\n"
            "    for argv in (['simulate', '--help'], ['--help'], ['simulate', '--num-requests', 'x']):\n"
            "        try:\n            main(argv)\n        except SystemExit:\n            pass\n"
            "loaded = [m for m in ('pandas', 'pyarrow') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    assert main(['simulate', '--num-requests', '20', '--out', {str(tmp_path)!r}]) == 0\n"
            "    for argv in (['measure', '--help'], ['compare', '--help'], ['predict-ops', '--help']):\n"
            "        try:\n            main(argv)\n        except SystemExit:\n            pass\n"
            "assert 'pandas' not in sys.modules and 'pyarrow' in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "steps.parquet").is_file() and (tmp_path / "requests.csv").is_file()


def test_top_level_help_is_the_whole_parsers_without_importing_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    # A command line naming no subcommand builds the outline (`roofline.commands.HELP`): the same help and the same
    # refusal of a misspelt command as the whole parser, and no command's modules (numpy, pandas) imported.
    from roofline.cli import build_parser, outline_parser

    whole, outline = build_parser(), outline_parser()
    assert outline.format_help() == whole.format_help()
    for argv in (["nope"], ["--bogus"]):
        refusals = []
        for parser in (whole, outline):
            with pytest.raises(SystemExit) as exited:
                parser.parse_args(argv)
            refusals.append((exited.value.code, capsys.readouterr().err))
        assert refusals[0] == refusals[1] and refusals[0][0] == 2 and "error:" in refusals[0][1]
    code = ("import sys, contextlib, io; from roofline.cli import main; out = io.StringIO(); "
            "with_help = contextlib.redirect_stdout(out)\n"
            "with with_help:\n"
            "    try:\n        main(['--help'])\n    except SystemExit as exc:\n        assert exc.code == 0\n"
            "assert 'simulate' in out.getvalue() and 'predict-ops' in out.getvalue()\n"
            "loaded = [m for m in sys.modules if m.startswith('roofline.commands.') or m in ('numpy', 'pandas')]\n"
            "assert not loaded, loaded")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_processs_run_freezes_its_imports_and_keeps_the_collector_on() -> None:
    # `entry` (the process's own run) imports with the collector off and freezes what the imports made; the collector
    # is on again afterwards and the printed result is the same as without (roofline.cli._parser).
    code = ("import contextlib, gc, io, sys; from roofline.cli import main\n"
            "printed = []\n"
            "for freeze in (False, True):\n"
            "    out = io.StringIO()\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        assert main(['simulate', '--num-requests', '3', '--json'], freeze_imports=freeze) == 0\n"
            "    assert gc.isenabled()\n"
            "    printed.append(out.getvalue())\n"
            "    assert (gc.get_freeze_count() > 0) == freeze, gc.get_freeze_count()\n"
            "assert printed[0] == printed[1] and printed[0].startswith('{')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE and SIGXFSZ as Linux has them")
@pytest.mark.parametrize("limit_bytes", [1_000, 100_000])
def test_a_write_the_machine_refuses_is_one_line_and_exit_1(tmp_path: Path, limit_bytes: int) -> None:
    # A file-size limit makes `--out`'s writes fail as a full disk does (EFBIG instead of ENOSPC): at 1,000 bytes in
    # the simulation's own process, at 100,000 in the writer child's (where the platform forks). Either is one line
    # naming the error, never a traceback.
    import resource
    import signal

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    argv = [sys.executable, "-m", "roofline", "simulate", "--num-requests", "2000", "--out", str(tmp_path / "o")]
    proc = subprocess.run(argv, preexec_fn=limit, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert _one_error_line(proc.stderr) == f"roofline simulate: error: --out {tmp_path / 'o'}: File too large"
