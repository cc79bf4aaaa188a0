"""`roofline predict-ops`: predicted seconds for single operators listed in a CSV.

    roofline predict-ops --hardware h100-sxm --input ops.csv --output predicted.csv

Input columns: `op` (gemm, attention_prefill, attention_decode, all_reduce, moe) and that op's columns
(`roofline.cost.single_ops.SINGLE_OP_COLUMNS`): gemm `m,n,k,dtype` (y = x W, x is m-by-k; dtype bf16, fp16, fp8,
int8); attention `batch_size,seq_len,num_heads,num_kv_heads,head_dim,dtype,kv_dtype` (seq_len: prompt length
for prefill, KV length for decode); all_reduce `message_bytes,num_devices,dtype`; moe
`num_tokens,hidden_size,inter_size,topk,num_experts,dtype`, and optionally `gated` (true: gate and up projections
with SiLU-and-mul between, SwiGLU experts, the value when the column is absent; false: one up projection and an
elementwise activation, as Nemotron-H's relu2 experts). Columns other rows need may be empty. Output: the input
rows, unchanged, plus `predicted_s`.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from roofline.commands import HELP
from roofline.cost.hardware import HardwareProfile, load_profile
from roofline.cost.single_ops import OP_DTYPES, OPTIONAL_OP_COLUMNS, SINGLE_OP_COLUMNS, predict_single_ops
from roofline.errors import UserError
from roofline.paths import check_output_file

if TYPE_CHECKING:
    import pandas as pd

_GEMM_DTYPES = ("bf16", "fp16", "fp8", "int8")
_ATTENTION_DTYPES = ("bf16", "fp16")
_KV_DTYPES = ("bf16", "fp16", "fp8")
# Columns holding a count: whole numbers >= 1.
_POSITIVE_INTS = {"m", "n", "k", "batch_size", "seq_len", "num_heads", "num_kv_heads", "head_dim", "num_devices",
                  "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "message_bytes"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("predict-ops", help=HELP["predict_ops"],
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hardware", required=True, help="hardware profile id or path")
    parser.add_argument("--input", required=True, type=Path, help="CSV of operators (see above)")
    parser.add_argument("--output", required=True, type=Path, help="CSV to write: the input plus predicted_s")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    check_output_file(args.output, "--output")
    hw = load_profile(args.hardware)
    frame = read_ops_csv(args.input)
    frame["predicted_s"] = predict_frame(hw, frame, str(args.input))
    frame.to_csv(args.output, index=False)
    return 0


def read_ops_csv(path: Path) -> pd.DataFrame:
    import pandas as pd  # (here: `predict-ops --help` and a refused flag import no pandas)

    if not path.is_file():
        raise UserError(f"--input: no such file '{path}'")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"--input {path}: not a readable CSV: {str(exc).splitlines()[0]}") from None
    if "op" not in frame.columns:
        raise UserError(f"--input {path}: missing column 'op'; allowed ops: {', '.join(SINGLE_OP_COLUMNS)}")
    return frame


def predict_frame(hw: HardwareProfile, frame: pd.DataFrame, where: str) -> np.ndarray:
    """Validate every row of `frame` (strings as read) and predict its seconds."""
    out = np.zeros(len(frame))
    ops = frame["op"].str.strip()
    for row, op in enumerate(ops):
        if op not in SINGLE_OP_COLUMNS:
            raise UserError(f"--input {where}: row {row + 2}, column 'op': {op!r} is not allowed; "
                            f"allowed: {', '.join(SINGLE_OP_COLUMNS)}")
    for kind, names in SINGLE_OP_COLUMNS.items():
        rows = np.flatnonzero((ops == kind).to_numpy())
        if not len(rows):
            continue
        for name in names:
            if name not in frame.columns:
                raise UserError(f"--input {where}: missing column '{name}' (needed by op '{kind}' in row "
                                f"{rows[0] + 2}); {kind} needs: {', '.join(names)}")
        cols = {name: _column(frame, rows, name, kind, where) for name in names}
        cols.update({name: _flag(frame, rows, name, kind, where) for name in OPTIONAL_OP_COLUMNS.get(kind, ())
                     if name in frame.columns})
        _check_relations(kind, cols, rows, where)
        out[rows] = predict_single_ops(hw, kind, cols)
    return out


def _check_relations(kind: str, cols: dict[str, np.ndarray], rows: np.ndarray, where: str) -> None:
    """Constraints between columns: top-k of at most all experts; query heads a multiple of KV heads; an all-reduce
    over at least 2 GPUs (vLLM runs none at TP 1)."""
    if kind == "all_reduce" and np.any(cols["num_devices"] < 2):
        i = rows[np.flatnonzero(cols["num_devices"] < 2)[0]]
        raise UserError(f"--input {where}: row {i + 2}, column 'num_devices': must be >= 2 (an all-reduce over one "
                        "GPU does nothing; vLLM runs none at tensor-parallel size 1)")
    pairs = {"moe": ("topk", "num_experts"), "attention_prefill": ("num_kv_heads", "num_heads"),
             "attention_decode": ("num_kv_heads", "num_heads")}
    if kind not in pairs:
        return
    small, big = pairs[kind]
    bad = (cols[small] > cols[big]) | ((cols[big] % cols[small] != 0) if kind != "moe" else False)
    if np.any(bad):
        i = rows[np.flatnonzero(bad)[0]]
        rule = "at most" if kind == "moe" else "a divisor of"
        raise UserError(f"--input {where}: row {i + 2}, column '{small}': must be {rule} '{big}'")


def _column(frame: pd.DataFrame, rows: np.ndarray, name: str, kind: str, where: str) -> np.ndarray:
    values = frame[name].to_numpy()[rows]
    if "dtype" in name:
        allowed = _KV_DTYPES if name == "kv_dtype" else (_GEMM_DTYPES if kind == "gemm" else
                                                         _ATTENTION_DTYPES if kind.startswith("attention") else
                                                         tuple(OP_DTYPES))
        for i, v in zip(rows, values):
            if v.strip() not in allowed:
                raise UserError(f"--input {where}: row {i + 2}, column '{name}': {v!r} is not allowed for op "
                                f"'{kind}'; allowed: {', '.join(allowed)}")
        return np.array([v.strip() for v in values])
    numbers = np.empty(len(values))
    for j, (i, v) in enumerate(zip(rows, values)):
        try:
            x = float(v)
        except ValueError:
            x = math.nan
        ok = math.isfinite(x) and x >= 1 and (name not in _POSITIVE_INTS or x == int(x))
        if not ok:
            raise UserError(f"--input {where}: row {i + 2}, column '{name}': {v!r} must be a whole number >= 1")
        numbers[j] = x
    return numbers


_FLAGS = {"true": True, "false": False}


def _flag(frame: pd.DataFrame, rows: np.ndarray, name: str, kind: str, where: str) -> np.ndarray:
    """A true / false column of `kind`'s rows (`OPTIONAL_OP_COLUMNS`)."""
    values = frame[name].to_numpy()[rows]
    for i, v in zip(rows, values):
        if v.strip().lower() not in _FLAGS:
            raise UserError(f"--input {where}: row {i + 2}, column '{name}': {v!r} is not allowed for op '{kind}'; "
                            f"allowed: {', '.join(_FLAGS)}")
    return np.array([_FLAGS[v.strip().lower()] for v in values])
