"""A robust fit of a profile's efficiency/executor parameters on relative error.

    samples = [("gemm", {"m": 64, "n": 4096, "k": 4096, "dtype": "bf16"}, 2.1e-5), ...]
    result = fit(samples, hw, ["efficiency.gemm_compute_efficiency", "efficiency.kernel_fixed_s"])
    result.profile        # hw with the fitted values (a new frozen profile)
    result.values         # {"efficiency.gemm_compute_efficiency": 0.83, ...} in SI units

A sample is (operator kind, features, measured seconds). Kinds are the single-operator kinds of
`roofline.cost.single_ops.SINGLE_OP_COLUMNS` (features = that kind's columns), or any kind a caller's `predict`
handles (step-trace calibration passes its own, e.g. whole steps). `predict(profile, kind, frame)` returns
seconds for the rows of one kind; samples are grouped by kind once, so the model is evaluated vectorized.

Method: parameters live in log space (they are positive), clipped to the range the profile YAML accepts
(`roofline.cost.params.efficiency_bounds`: fractions of a peak at most 1, overlap_exponent in [1, 64]); the
residual is log(predicted / measured), which weighs a 10 % miss on a 3 us kernel like one on a 3 ms kernel;
outliers (a mis-measured row, a kernel the model does not describe) are down-weighted by a soft-L1
(pseudo-Huber) loss with scale `f_scale`. A coarse coordinate search (each parameter at 1/4 .. 4x, twice
round) picks the start, then iteratively reweighted Levenberg-Marquardt on a numerical Jacobian refines it.
Deterministic: no random starts.

The MoE fits of a kernel family (`roofline.calibration.moe_fits`) minimize a median (or mean) absolute log error,
which is flat in patches and not a sum of squares: `minimize_from_starts` (Nelder-Mead from fixed starts, the best
end point) and `minimize_bounded_scalar` (one parameter, bounded) are the optimizers for such a loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from roofline.calibration.moe_routing import mean_over_draws, table_routing
from roofline.calibration.op_tables import replay_working_set_bytes
from roofline.cost.hardware import HardwareProfile
from roofline.cost.params import FITTABLE, efficiency_bounds
from roofline.cost.single_ops import OPTIONAL_OP_COLUMNS, SINGLE_OP_COLUMNS, predict_single_ops
from roofline.errors import UserError

Sample = tuple[str, Mapping[str, Any], float]
Predict = Callable[[HardwareProfile, str, pd.DataFrame], np.ndarray]

_TINY = 1e-12  # the lowest value of a positive parameter (log space needs > 0)


def _bounds(name: str) -> tuple[float, float]:
    """Log-space bounds of a parameter: an efficiency field's allowed range (`efficiency_bounds`: fractions of a
    peak at most 1), executor times positive."""
    section, field = _split(name)
    lo, hi = efficiency_bounds(field) if section == "efficiency" else (0.0, np.inf)
    return np.log(max(lo, _TINY)), np.log(hi)


def predict_table(profile: HardwareProfile, kind: str, frame: pd.DataFrame) -> np.ndarray:
    """Default predictor: single operators of `roofline.cost.single_ops.SINGLE_OP_COLUMNS`, as the operator tables
    measure them (`warm_l2_profile`; MoE rows with a `distribution` column: the tables' token distributions,
    `roofline.calibration.moe_routing`, averaged over its draws)."""
    names = SINGLE_OP_COLUMNS[kind]
    cols = {n: frame[n].to_numpy(dtype=str if "dtype" in n else np.float64) for n in names}
    cols.update({n: frame[n].to_numpy(bool) for n in OPTIONAL_OP_COLUMNS.get(kind, ()) if n in frame})
    if kind == "moe" and "distribution" in frame:  # the table's own routing (`roofline.calibration.moe_routing`)
        rows, loads, weights = table_routing(frame["distribution"].to_numpy(str), cols["num_tokens"],
                                             cols["num_experts"], cols["topk"])
        per_draw = predict_single_ops(profile, kind, {**{n: v[rows] for n, v in cols.items()}, "expert_loads": loads})
        return mean_over_draws(rows, weights, per_draw, len(frame))
    out = predict_single_ops(profile, kind, cols)
    warm = l2_resident_rows(profile, kind, cols)
    if warm is not None and warm.any():
        out[warm] = predict_single_ops(warm_l2_profile(profile), kind, {n: v[warm] for n, v in cols.items()})
    return out


def l2_resident_rows(profile: HardwareProfile, kind: str, cols: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Rows of an operator table whose replay working set (`roofline.calibration.op_tables.replay_working_set_bytes`)
    fits in the chip's L2 (`l2_cache_mib`, the datasheet capacity): the collector replays the call on the same
    buffers with no flush, so those rows read their bytes from the L2. None where the chip's L2 is not known or the
    kind's working set is not described. The operator tables' measurement condition only: never used for a
    serving step, where each layer's weights and KV cache differ and the working set between two uses of a byte
    is the whole model."""
    if profile.l2_cache_bytes is None:
        return None
    working_set = replay_working_set_bytes(kind, dict(cols))
    return None if working_set is None else working_set <= profile.l2_cache_bytes


def warm_l2_profile(profile: HardwareProfile) -> HardwareProfile:
    """`profile` with its memory bandwidth at the L2-resident rate (efficiency.l2_bandwidth_factor x DRAM): every
    byte of an L2-resident table row (weights, activations, KV cache, split-K partials) moves at that rate."""
    return replace(profile, memory_bandwidth_bytes_per_s=profile.memory_bandwidth_bytes_per_s
                   * profile.efficiency.l2_bandwidth_factor)


@dataclass(frozen=True)
class FitResult:
    profile: HardwareProfile
    values: dict[str, float]  # fitted parameter -> value (SI units)
    initial_values: dict[str, float]
    num_iterations: int
    train_median_abs_rel_err: float
    train_p90_abs_rel_err: float


def get_param(profile: HardwareProfile, name: str) -> float:
    section, field = _split(name)
    return float(getattr(getattr(profile, section), field))


def with_params(profile: HardwareProfile, values: Mapping[str, float]) -> HardwareProfile:
    """A copy of `profile` with dotted parameters (`efficiency.memory_efficiency`) replaced."""
    by_section: dict[str, dict[str, float]] = {}
    for name, value in values.items():
        section, field = _split(name)
        by_section.setdefault(section, {})[field] = float(value)
    return replace(profile, **{s: replace(getattr(profile, s), **f) for s, f in by_section.items()})


def _split(name: str) -> tuple[str, str]:
    if name not in FITTABLE:
        raise UserError(f"fit: unknown parameter '{name}'; allowed: {', '.join(FITTABLE)}")
    section, field = name.split(".")
    return section, field


def relative_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted / measured - 1| per row."""
    return np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)


def group_samples(samples: Sequence[Sample]) -> dict[str, tuple[pd.DataFrame, np.ndarray]]:
    """Samples -> {kind: (features frame, measured seconds)}, kinds in first-seen order."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    measured: dict[str, list[float]] = {}
    for kind, features, seconds in samples:
        if not seconds > 0:
            raise UserError(f"fit: a measured time must be positive, got {seconds!r} for a '{kind}' sample")
        rows.setdefault(kind, []).append(features)
        measured.setdefault(kind, []).append(float(seconds))
    return {k: (pd.DataFrame(rows[k]), np.asarray(measured[k])) for k in rows}


def fit(samples: Sequence[Sample], profile: HardwareProfile, param_names: Sequence[str],
        predict: Predict = predict_table, f_scale: float = 0.1, max_iterations: int = 60,
        prior_scale: float = 0.0, progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit `param_names` of `profile` to the samples (see the module docstring).

    `prior_scale` > 0 adds one residual per parameter, prior_scale * log(value / starting value): a log-normal
    prior centred on the profile's values (a MAP fit). A parameter the samples barely constrain then stays near
    its physical starting value instead of drifting to a bound to absorb noise; one the data pin down moves
    freely (with N samples, moving it by a factor e costs as much as a prior_scale error on one sample).
    `progress` gets a line after the coarse search and after each Levenberg-Marquardt iteration."""
    if not samples:
        raise UserError("fit: no samples to fit")
    groups = group_samples(samples)
    names = list(dict.fromkeys(param_names))
    for name in names:
        _split(name)
    x0 = np.log([max(get_param(profile, n), _TINY) for n in names])
    lo, hi = (np.array(b) for b in zip(*(_bounds(n) for n in names)))

    def data_residuals(x: np.ndarray) -> np.ndarray:
        p = with_params(profile, dict(zip(names, np.exp(np.clip(x, lo, hi)))))
        return np.concatenate([np.log(np.maximum(predict(p, k, f), 1e-15) / m) for k, (f, m) in groups.items()])

    def residuals(x: np.ndarray) -> np.ndarray:
        if prior_scale <= 0:
            return data_residuals(x)
        return np.concatenate([data_residuals(x), prior_scale * (np.clip(x, lo, hi) - x0)])

    start = _coarse_search(residuals, x0, lo, hi, f_scale)
    if progress is not None:
        progress(f"{len(names)} parameters on {sum(len(m) for _, m in groups.values())} samples: coarse search done, "
                 f"then at most {max_iterations} Levenberg-Marquardt iterations")
    x, iterations = _irls_levenberg_marquardt(residuals, start, lo, hi, f_scale, max_iterations, progress)
    values = dict(zip(names, np.exp(x).tolist()))
    fitted = with_params(profile, values)
    err = np.abs(np.exp(data_residuals(x)) - 1.0)
    return FitResult(profile=fitted, values=values, initial_values=dict(zip(names, np.exp(x0).tolist())),
                     num_iterations=iterations, train_median_abs_rel_err=float(np.median(err)),
                     train_p90_abs_rel_err=float(np.percentile(err, 90)))


def _soft_l1(r: np.ndarray, f_scale: float) -> float:
    return float(np.sum(2 * f_scale**2 * (np.sqrt(1 + (r / f_scale) ** 2) - 1)))


# Coarse search before Levenberg-Marquardt: each parameter tried at these factors of its value, in turn.
_COARSE_FACTORS = (0.25, 0.5, 2.0, 4.0)
_COARSE_ROUNDS = 2


def _coarse_search(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   f_scale: float) -> np.ndarray:
    """Deterministic coordinate search in log space over `_COARSE_FACTORS`: moves the start out of shallow
    local minima that a gradient method from the defaults gets stuck in (the tile/wave terms make the loss
    piecewise smooth)."""
    x = np.clip(x, lo, hi)
    best = _soft_l1(residuals(x), f_scale)
    for _ in range(_COARSE_ROUNDS):
        for i in range(len(x)):
            for factor in _COARSE_FACTORS:
                trial = x.copy()
                trial[i] = np.clip(x[i] + np.log(factor), lo[i], hi[i])
                cost = _soft_l1(residuals(trial), f_scale)
                if cost < best:
                    x, best = trial, cost
    return x


def _irls_levenberg_marquardt(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, lo: np.ndarray,
                              hi: np.ndarray, f_scale: float, max_iterations: int,
                              progress: Callable[[str], None] | None = None) -> tuple[np.ndarray, int]:
    """Minimize sum rho(r_i) with rho the soft-L1 loss 2*f^2*(sqrt(1 + (r/f)^2) - 1), by Levenberg-Marquardt
    steps on the IRLS-weighted least squares problem (weights w = rho'(r) / r = 1/sqrt(1 + (r/f)^2))."""
    x = np.clip(x, lo, hi)

    def loss(r: np.ndarray) -> float:
        return _soft_l1(r, f_scale)

    r = residuals(x)
    cost = loss(r)
    damping = 1e-2
    iteration = 0
    for iteration in range(1, max_iterations + 1):
        w = 1.0 / np.sqrt(1 + (r / f_scale) ** 2)
        jac = _jacobian(residuals, x, r, lo, hi)
        sw = np.sqrt(w)
        a = jac * sw[:, None]
        b = r * sw
        jtj = a.T @ a
        g = a.T @ b
        improved = False
        while damping < 1e8:
            step = np.linalg.solve(jtj + damping * np.diag(np.diag(jtj) + 1e-12), -g)
            x_new = np.clip(x + step, lo, hi)
            r_new = residuals(x_new)
            cost_new = loss(r_new)
            if cost_new < cost:
                improved = True
                converged = cost - cost_new < 1e-7 * max(cost, 1e-12)
                x, r, cost = x_new, r_new, cost_new
                damping = max(damping / 3, 1e-9)
                break
            damping *= 4
        if progress is not None:
            progress(f"iteration {iteration}/{max_iterations}: loss {cost:.6g}")
        if not improved or converged:
            break
    return x, iteration


def _jacobian(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray, lo: np.ndarray,
              hi: np.ndarray) -> np.ndarray:
    """Forward differences in log space (a step of 1e-4 is a 0.01 % change of the parameter); at an upper
    bound the step goes backwards."""
    jac = np.empty((len(r), len(x)))
    for i in range(len(x)):
        h = 1e-4 if x[i] + 1e-4 <= hi[i] else -1e-4
        xi = x.copy()
        xi[i] += h
        jac[:, i] = (residuals(xi) - r) / h
    return jac


def minimize_from_starts(loss: Callable[..., float], starts: Sequence[Sequence[float]], max_iterations: int,
                         args: tuple[Any, ...] = ()) -> np.ndarray:
    """The point minimizing `loss(x, *args)`: Nelder-Mead (scipy, to 1e-3 in x and 1e-5 in the loss, at most
    `max_iterations`) from each of `starts`, the end point with the lowest loss (the first on a tie). Deterministic.
    Bounds are the loss's to apply (clip its coordinates)."""
    from scipy.optimize import minimize  # (imported when a fit runs: the CLI starts without it)

    runs = [minimize(loss, np.array(x0, dtype=np.float64), args=args, method="Nelder-Mead",
                     options={"xatol": 1e-3, "fatol": 1e-5, "maxiter": max_iterations}) for x0 in starts]
    return np.asarray(min(runs, key=lambda r: r.fun).x)


def minimize_bounded_scalar(loss: Callable[[float], float], bounds: tuple[float, float], tolerance: float) -> float:
    """The value in `bounds` minimizing a one-parameter `loss`: bounded Brent / golden-section search (scipy) to
    `tolerance`. Deterministic."""
    from scipy.optimize import minimize_scalar

    return float(minimize_scalar(loss, bounds=bounds, method="bounded", options={"xatol": tolerance}).x)
