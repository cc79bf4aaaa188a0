"""The workload's request specs made in C (roofline/sim/_simcore.c `make_specs`; roofline/sim/workload.py's
`_single_turn` loop, the reference): in use where built, and the same specs as the Python loop to the field's type
and the arrival order; and what the simulation reads of them in C (`rows_of`, `spec_column`: recorder.py's
comprehensions, the reference)."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from roofline.sim import recorder as recorder_module
from roofline.sim import workload as workload_module
from roofline.sim.native import _simcore
from roofline.sim.recorder import Recorder
from roofline.sim.workload import (
    ArrivalProcess,
    LengthDistribution,
    RequestSpec,
    SharedPrefix,
    Workload,
    load_workload,
    sample_requests,
)

_built = pytest.mark.skipif(not workload_module._SPECS_IN_C, reason="roofline.sim._simcore is not built or not selected")


def _workloads() -> list[Workload]:
    chat = dataclasses.replace(load_workload("sharegpt-chat"), num_requests=3000)
    return [
        chat,
        dataclasses.replace(chat, seed=7, num_requests=1),
        dataclasses.replace(chat, num_requests=0),
        # a shared prefix longer than some prompts (those lengthened to it), in 3 groups
        dataclasses.replace(chat, shared_prefix=SharedPrefix(num_groups=3, prefix_tokens=200)),
        # fixed lengths arriving all at once (ties: generation order kept)
        Workload("burst", seed=2, num_requests=500, arrival=ArrivalProcess("all_at_once"),
                 prompt_tokens=LengthDistribution("fixed", value=64),
                 output_tokens=LengthDistribution("uniform", min_tokens=1, max_tokens=9)),
        Workload("bursts", seed=3, num_requests=700, arrival=ArrivalProcess("burst", rate_per_s=5.0, burst_size=16),
                 prompt_tokens=LengthDistribution("normal", mean=300, std=80, min_tokens=1),
                 output_tokens=LengthDistribution("lognormal", mean_log=4.0, std_log=0.5, max_tokens=900)),
    ]


def _shape(specs: list[RequestSpec]) -> list[list[tuple[str, type, object]]]:
    """Each spec's fields in order with their values' exact types."""
    names = [f.name for f in dataclasses.fields(RequestSpec)]
    return [[(name, type(getattr(spec, name)), getattr(spec, name)) for name in names] for spec in specs]


@_built
@pytest.mark.parametrize("index", range(6))
def test_the_compiled_specs_are_the_python_loops(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = _workloads()[index]
    compiled = sample_requests(workload)
    monkeypatch.setattr(workload_module, "_SPECS_IN_C", False)
    python = sample_requests(workload)
    assert len(compiled) == len(python) == workload.num_requests
    assert compiled == python
    assert _shape(compiled) == _shape(python)
    assert [hash(s) for s in compiled] == [hash(s) for s in python]
    assert all(type(s) is RequestSpec for s in compiled)
    if workload.shared_prefix is not None:  # (the lengthened prompts and the groups took part)
        assert {s.prefix_group for s in compiled} == {0, 1, 2}
        assert min(s.num_prompt_tokens for s in compiled) == 201


@_built
def test_a_compiled_spec_is_frozen_and_a_dataclass() -> None:
    spec = sample_requests(_workloads()[1])[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.arrival_s = 1.0  # type: ignore[misc]
    assert dataclasses.replace(spec, turn=2) == RequestSpec(spec.request_id, spec.arrival_s, spec.num_prompt_tokens,
                                                            spec.num_output_tokens, turn=2)
    assert spec.request_id == "r0" and spec.arrival_s == 0.0 and spec.block_ids is None


@_built
def test_make_specs_refuses_a_column_of_another_length() -> None:
    names = tuple(name for name, _ in workload_module._SPEC_DEFAULTS)
    values = ([0.0, 1.0], [5], [3, 4], None, None, 0, None, 0)
    with pytest.raises(ValueError, match="n items"):
        _simcore.make_specs(RequestSpec, 2, "r", names, values)
    with pytest.raises(TypeError):
        _simcore.make_specs(RequestSpec, 2, "r", names, values[:-1])
    made = _simcore.make_specs(RequestSpec, 2, "q", names, ([0.0, 1.0], [5, 6], [3, 4], None, None, 0, None, 0))
    assert made == [RequestSpec("q0", 0.0, 5, 3), RequestSpec("q1", 1.0, 6, 4)]


@dataclasses.dataclass(frozen=True)
class _DictSpec:  # (no slots: its fields in its instance dict)
    name: str
    size: int
    weight: float = 1.0


@_built
def test_make_specs_writes_slots_and_instance_dicts_as_init_does() -> None:
    made = _simcore.make_specs(_DictSpec, 3, "x", ("name", "size", "weight"), ([7, 8, 9], 0.5))
    assert made == [_DictSpec("x0", 7, 0.5), _DictSpec("x1", 8, 0.5), _DictSpec("x2", 9, 0.5)]
    assert [vars(m) for m in made] == [vars(_DictSpec(f"x{i}", 7 + i, 0.5)) for i in range(3)]
    assert not hasattr(RequestSpec("r", 0.0, 1, 1), "__dict__")  # (slots: written at their offsets)
    blocks = tuple(range(4, 6))
    held = sys.getrefcount(blocks)
    spec = _simcore.make_specs(RequestSpec, 1, "r", tuple(name for name, _ in workload_module._SPEC_DEFAULTS),
                               ([2.5], [10], [3], 1, None, 0, blocks, 16))[0]
    assert spec == RequestSpec("r0", 2.5, 10, 3, prefix_group=1, block_ids=(4, 5), block_tokens=16)
    assert sys.getrefcount(blocks) == held + 1  # (the spec's own reference)


def test_pure_python_samples_with_the_python_loop() -> None:
    code = ("from roofline.sim import workload as w; from dataclasses import replace; "
            "print(w._SPECS_IN_C, len(w.sample_requests(replace(w.load_workload('sharegpt-chat'), num_requests=5))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "ROOFLINE_PURE_PYTHON": "1"}).stdout
    assert out.split() == ["False", "5"]


@pytest.mark.skipif(not recorder_module._ROWS_IN_C, reason="roofline.sim._simcore is not built or not selected")
def test_the_recorders_rows_are_the_comprehensions(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = sample_requests(_workloads()[0])
    specs.append(dataclasses.replace(specs[5], arrival_s=1e9))  # an id twice: the later row kept, the first key
    compiled = Recorder(specs, record_steps=False).row_of
    monkeypatch.setattr(recorder_module, "_ROWS_IN_C", False)
    python = Recorder(specs, record_steps=False).row_of
    assert compiled == python and list(compiled.items()) == list(python.items())
    assert compiled["r5"] == len(specs) - 1 and all(type(v) is int for v in compiled.values())
    assert [k is s.request_id for k, s in zip(compiled, specs)] == [k is s.request_id for k, s in zip(python, specs)]
    with pytest.raises(AttributeError):
        _simcore.rows_of([specs[0], object()], "request_id")


@pytest.mark.skipif(not recorder_module._COLUMNS_IN_C, reason="roofline.sim._simcore is not built or not selected")
def test_the_result_reads_the_specs_columns_as_the_comprehensions() -> None:
    specs = sample_requests(_workloads()[3])
    for name, dtype in (("arrival_s", np.float64), ("num_prompt_tokens", np.int64), ("prefix_group", np.int64)):
        made = recorder_module._spec_column(specs, name, dtype)
        expected = np.array([getattr(s, name) for s in specs], dtype=dtype)
        assert made.dtype == expected.dtype and made.tobytes() == expected.tobytes()
    assert _simcore.spec_column(specs, "request_id", None) == [s.request_id for s in specs]
    # another type than the specs hold: the comprehension decides (an int time, a NumPy int, a bool)
    odd = [RequestSpec("a", 1, 5, 1), RequestSpec("b", 2.5, np.int64(6), 1), RequestSpec("c", 0.0, True, 1)]  # type: ignore[arg-type]
    assert not _simcore.spec_column(odd, "arrival_s", np.empty(3))
    assert not _simcore.spec_column(odd[1:], "num_prompt_tokens", np.empty(2, np.int64))
    assert recorder_module._spec_column(odd, "arrival_s", np.float64).tolist() == [1.0, 2.5, 0.0]
    assert recorder_module._spec_column(odd, "num_prompt_tokens", np.int64).tolist() == [5, 6, 1]
    with pytest.raises(OverflowError):
        _simcore.spec_column([RequestSpec("a", 0.0, 1 << 70, 1)], "num_prompt_tokens", np.empty(1, np.int64))
    with pytest.raises(TypeError):
        _simcore.spec_column(specs, "arrival_s", np.empty(len(specs), np.float32))
