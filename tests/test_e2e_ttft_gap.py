"""roofline.judge.ttft_gap: the per-request / per-token split of the judge's TTFT gap."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.judge.ttft_gap import fit_gap, gap_table, mean_prompt_tokens


def test_mean_prompt_tokens_is_the_mean_of_the_ranged_lengths() -> None:
    assert mean_prompt_tokens(1024) == (819 + 1024) / 2
    assert mean_prompt_tokens(8192) == (6553 + 8192) / 2


def test_fit_gap_recovers_a_line() -> None:
    tokens = np.array([921.5, 921.5, 7372.5])
    fixed_s, per_token_s, rms_s = fit_gap(tokens, 0.008 + 4e-6 * tokens)
    assert fixed_s == pytest.approx(0.008)
    assert per_token_s == pytest.approx(4e-6)
    assert rms_s == pytest.approx(0.0, abs=1e-12)


def _row(tp: int, isl: int, concurrency: int, measured: float, predicted: float) -> dict[str, str]:
    return {"status": "simulated", "model": "m", "system": "s", "backend_version": "", "precision": "fp8",
            "tp": str(tp), "isl": str(isl), "concurrency": str(concurrency),
            "measured_ttft_s": str(measured), "predicted_ttft_s": str(predicted)}


def test_gap_table_reads_only_concurrency_4_rows() -> None:
    rows = [_row(1, 1024, 4, 0.030, 0.020), _row(8, 1024, 4, 0.030, 0.020), _row(8, 8192, 4, 0.060, 0.030),
            _row(8, 8192, 16, 9.0, 0.0)]
    lines = gap_table(rows)
    assert len(lines) == 2
    cells = lines[1].split(" | ")
    assert cells[:5] == ["m", "s", "unversioned", "fp8", "3"]
    # gap 10 ms at 921.5 tokens, 30 ms at 7,372.5: 20 ms over 6,451 tokens
    assert float(cells[6]) == pytest.approx(20e-3 / 6451 * 1e6, abs=0.005)
