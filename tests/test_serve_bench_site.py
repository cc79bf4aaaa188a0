"""benchmarks/ground_truth/timeline_site/sitecustomize.py: with VLLM_SERVE_CPU_VERSION set, every interpreter started
with the folder on its path (vLLM's spawned engine core too) answers the version lookup of "vllm" with it, and only
that lookup; without it nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parents[1] / "benchmarks" / "ground_truth" / "timeline_site"
PROBE = ("import importlib.metadata as m\n"
         "try:\n    print(m.version('vllm'))\nexcept m.PackageNotFoundError:\n    print('absent')\n"
         "print(m.version('pip'))")


def _probe(**env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("VLLM_SERVE_CPU_VERSION", "VLLM_SERVE_TIMELINE")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, "PYTHONPATH": str(SITE), **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_version_lookup_of_vllm_is_answered_in_a_fresh_interpreter() -> None:
    answer, pip = _probe(VLLM_SERVE_CPU_VERSION="0.11.0+cpu")
    assert answer == "0.11.0+cpu"
    assert pip == _probe()[1]  # other distributions are looked up as before


def test_without_the_variable_nothing_changes() -> None:
    import importlib.metadata

    try:
        expected = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        expected = "absent"
    assert _probe()[0] == expected


SWITCH_PROBE = ("import sys\nprint(sys.getswitchinterval())\n"
                "from vllm.v1.engine.core import EngineCoreProc\nprint(sys.getswitchinterval())\n"
                "EngineCoreProc()\nprint(sys.getswitchinterval())")


def _switch_probe(tmp_path: Path, **env: str) -> list[float]:
    """A stand-in `vllm.v1.engine.core` (the hook wraps whatever EngineCoreProc the module defines): the switch interval
    at start, after the import, after an EngineCoreProc is constructed."""
    pkg = tmp_path / "vllm" / "v1" / "engine"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "core.py").write_text("class EngineCoreProc:\n    def __init__(self):\n        self.ok = True\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SERVE_")}
    out = subprocess.run([sys.executable, "-c", SWITCH_PROBE], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={**clean, "PYTHONPATH": os.pathsep.join([str(SITE), str(tmp_path)]), **env})
    return [float(x) for x in out.stdout.split()]


def test_the_switch_interval_is_set_in_every_server_process_or_the_engine_core_alone(tmp_path: Path) -> None:
    assert _switch_probe(tmp_path / "a") == [0.005, 0.005, 0.005]  # without the variable: Python's default
    assert _switch_probe(tmp_path / "b", VLLM_SERVE_SWITCH_INTERVAL_S="0.0005",
                         VLLM_SERVE_SWITCH_INTERVAL_IN="server") == [0.0005] * 3
    # Only where an EngineCoreProc is constructed (vLLM's engine-core process), not where the module is merely imported
    # (the API server imports it too).
    assert _switch_probe(tmp_path / "c", VLLM_SERVE_SWITCH_INTERVAL_S="0.0005",
                         VLLM_SERVE_SWITCH_INTERVAL_IN="engine-core") == [0.005, 0.005, 0.0005]


def test_the_bench_refuses_a_switch_interval_out_of_range(tmp_path: Path) -> None:
    bench = SITE.parent / "vllm_serve_bench.py"
    out = subprocess.run([sys.executable, str(bench), "--work-dir", str(tmp_path), "--out", str(tmp_path / "r.json"),
                          "--switch-interval-s", "0"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "--switch-interval-s: 0.0: must be > 0 and <= 1 (seconds)"
    assert not list(tmp_path.iterdir())  # refused before anything was built


STEPS_PROBE = ("import types\nfrom vllm.v1.engine.core import EngineCore\n"
               "d = types.SimpleNamespace(iteration_index=4, num_ctx_requests=1, num_ctx_tokens=130,\n"
               "    num_generation_requests=7, num_generation_tokens=7, elapsed_ms=12.345)\n"
               "out = {}\nEngineCore()._attach_iteration_details(out, d)\nprint(out['seen'] is d)\n"
               "EngineCore()._attach_iteration_details(out, None)\nprint(out['seen'] is None)")


def test_the_engine_core_writes_each_steps_details_in_the_stat_loggers_words(tmp_path: Path) -> None:
    """VLLM_SERVE_ENGINE_STEPS: the wrapped `_attach_iteration_details` still does vLLM's work and then writes one line
    a step with details (none for a step without), which vllm_serve_bench.py's ITERATION parses as the server's log."""
    sys.path.insert(0, str(SITE.parent))
    from vllm_serve_bench import engine_steps

    pkg = tmp_path / "vllm" / "v1" / "engine"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "v1", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "core.py").write_text("class EngineCore:\n    def _attach_iteration_details(self, outputs, details):\n"
                                 "        outputs['seen'] = details\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_SERVE_")}
    steps = tmp_path / "steps.log"
    out = subprocess.run([sys.executable, "-c", STEPS_PROBE], cwd=tmp_path, capture_output=True, text=True, check=True,
                         env={**clean, "PYTHONPATH": os.pathsep.join([str(SITE), str(tmp_path)]),
                              "VLLM_SERVE_ENGINE_STEPS": str(steps)})
    assert out.stdout.split() == ["True", "True"]
    lines = steps.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Iteration(4): 1 context requests, 130 context tokens, 7 generation "
                                                   "requests, 7 generation tokens, iteration elapsed time: 12.35 ms t=")
    assert engine_steps(steps, 0) == ([[4, 1, 130, 7, 7, 12.35]], len(lines[0]) + 1)
    assert engine_steps(tmp_path / "absent.log", 0) == ([], 0)  # not yet written: no steps
    # Without the variable the module is left alone (nothing written, vLLM's method as it was).
    subprocess.run([sys.executable, "-c", STEPS_PROBE], cwd=tmp_path, capture_output=True, text=True, check=True,
                   env={**clean, "PYTHONPATH": os.pathsep.join([str(SITE), str(tmp_path)])})
    assert len(steps.read_text().splitlines()) == 1


def test_interleaved_sessions_alternate_the_counts_one_repeat_each() -> None:
    sys.path.insert(0, str(SITE.parent))
    from vllm_serve_bench import session_plan

    assert session_plan([1, 2], 0, 3, interleave=False) == [(1, [0, 1, 2]), (2, [0, 1, 2])]
    assert session_plan([1, 2], 0, 3, interleave=True) == [(1, [0]), (2, [0]), (1, [1]), (2, [1]), (1, [2]), (2, [2])]
    assert session_plan([2], 5, 2, interleave=True) == [(2, [5]), (2, [6])]


def test_the_bench_refuses_bad_repeats_and_server_counts(tmp_path: Path) -> None:
    bench = SITE.parent / "vllm_serve_bench.py"
    for flags, line in ((["--repeats", "0"], "--repeats: 0: must be >= 1"),
                        (["--api-server-counts", "1,x"], "--api-server-counts: 1,x: must be distinct integers >= 1, "
                                                         "comma-separated (e.g. 1,2)"),
                        (["--api-server-counts", "1,1"], "--api-server-counts: 1,1: must be distinct integers >= 1, "
                                                         "comma-separated (e.g. 1,2)")):
        out = subprocess.run([sys.executable, str(bench), "--work-dir", str(tmp_path / "w"),
                              "--out", str(tmp_path / "r.json"), *flags], capture_output=True, text=True)
        assert (out.returncode, out.stderr.strip()) == (2, line)
    assert not list(tmp_path.iterdir())  # refused before anything was built


def test_the_engine_cores_socket_threads_name_themselves(tmp_path: Path) -> None:
    # VLLM_SERVE_NAME_ENGINE_THREADS: the wrapped EngineCoreProc methods rename the thread that runs them (the kernel's
    # comm), and only that thread; arguments and results pass through.
    probe = ("import sys, threading, types\n"
             "import sitecustomize as sc\n"
             "class P:\n"
             "    def process_input_sockets(self, a, b=0):\n"
             "        return open(f'/proc/self/task/{threading.get_native_id()}/comm').read().strip(), a, b\n"
             "    def process_output_sockets(self):\n"
             "        return open(f'/proc/self/task/{threading.get_native_id()}/comm').read().strip()\n"
             "sc._name_engine_threads(types.SimpleNamespace(EngineCoreProc=P))\n"
             "out = {}\n"
             "t = threading.Thread(target=lambda: out.update(i=P().process_input_sockets(1, b=2))); t.start(); t.join()\n"
             "t = threading.Thread(target=lambda: out.update(o=P().process_output_sockets())); t.start(); t.join()\n"
             "print(out['i'][0], out['i'][1], out['i'][2], out['o'], open('/proc/self/comm').read().strip() != 'EC_input')")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(SITE)},
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.split() == ["EC_input", "1", "2", "EC_output", "True"]


def test_a_core_list_that_is_not_cpu_numbers_is_refused_in_one_line_before_the_server_starts(tmp_path) -> None:
    bench = SITE.parent / "vllm_serve_bench.py"
    out = subprocess.run([sys.executable, str(bench), "--work-dir", str(tmp_path), "--out", str(tmp_path / "r.json"),
                          "--engine-io-cores", "0-1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "--engine-io-cores: '0-1': must be CPU numbers separated by commas, e.g. 0 or 0,2"
    assert not (tmp_path / "r.json").exists()
