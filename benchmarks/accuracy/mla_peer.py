"""The peer on the MLA judge's held-out rows, and the MLA tables' own consistency.

    python benchmarks/accuracy/mla_peer.py            # aiconfigurator's interpolation, held-out shapes removed
    python benchmarks/accuracy/mla_peer.py --consistency   # repeated shapes, non-monotone neighbours per table

The peer: aiconfigurator-core 0.12.0 estimates an MLA layer from its module tables (`sdk.operations.mla.MLAModule`,
interpolated by the package's compiled engine). This script builds a systems folder equal to the package's but with
the MLA module tables' held-out rows removed (the per-rank head counts `roofline.calibration.mla_fit.held_out`
marks: 4 and 16; every other file linked, nothing copied into the repository), loads the package's database from it
(`get_database_view(..., systems_paths=[folder])`) and queries `MLAModule` for every held-out row of
`roofline.calibration.mla_fit.module_table` (the rows `benchmarks/accuracy/mla_accuracy.py` judges): context rows
with `batch_size` and `s` = isl, generation rows with `s` = step + 1 (the engine reads a table's generation `step`
as the query's s - 1: with the whole table, every row of the judge's tables is returned exactly, checked per row
with `--check`). Its error is what interpolating the tables across head counts costs: a floor for the tables' own
smoothness, not a model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from roofline.calibration.mla_fit import GPUS, held_out, module_table  # noqa: E402
from roofline.calibration.op_tables import package_root  # noqa: E402

KEYS = ["phase", "num_heads", "batch_size", "isl", "step", "gemm_type", "kv_cache_dtype"]


def reduced_systems(dst: Path) -> None:
    """`dst`: the package's systems folder with the MLA module tables' held-out rows removed (links elsewhere)."""
    src = package_root().parent  # systems/ (package_root is systems/data)
    for entry in src.iterdir():
        if entry.name != "data":
            os.symlink(entry, dst / entry.name)
    for gpu in (src / "data").iterdir():
        (dst / "data" / gpu.name).mkdir(parents=True)
        for sub in gpu.iterdir():
            if sub.name != "mla":
                os.symlink(sub, dst / "data" / gpu.name / sub.name)
                continue
            for f in sub.rglob("*"):
                out = dst / f.relative_to(src)
                if f.is_dir():
                    out.mkdir(parents=True, exist_ok=True)
                elif f.name.endswith("_module_perf.parquet"):
                    d = pd.read_parquet(f)
                    d[[not held_out(h) for h in d.num_heads]].to_parquet(out, index=False)
                else:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(f, out)


def peer_s(systems: str | None, gpu: str, rows: pd.DataFrame) -> np.ndarray:
    """aiconfigurator's MLAModule estimate (seconds) of each row, from the tables under `systems` (None: the
    package's own)."""
    import aiconfigurator_core.sdk.operations as ops
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.perf_database import get_database_view

    kv = {"bfloat16": common.KVCacheQuantMode.bfloat16, "fp8": common.KVCacheQuantMode.fp8}
    gemm = {"bfloat16": common.GEMMQuantMode.bfloat16, "fp8_block": common.GEMMQuantMode.fp8_block,
            "nvfp4": common.GEMMQuantMode.nvfp4}
    logging.disable(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        db = get_database_view(gpu, "vllm", str(rows.version.iloc[0]), systems_paths=[systems] if systems else None)
    out = []
    for r in rows.itertuples():
        op = ops.MLAModule("mla", 1, r.phase == "context", int(r.num_heads), kv[r.kv_cache_dtype],
                           common.FMHAQuantMode.bfloat16, gemm[r.gemm_type], native_num_heads=128)
        s = int(r.isl) if r.phase == "context" else int(r.step) + 1
        out.append(float(op._engine_query(db, batch_size=int(r.batch_size), s=s)) * 1e-3)
    return np.array(out)


def consistency(gpu: str) -> str:
    """Repeated shapes, and adjacent table entries (one key apart) whose latency drops by more than 10 % as the
    heads, batch, isl or step grow."""
    d = module_table(gpu)
    cells = [str(int(d.duplicated(KEYS, keep=False).sum()))]
    for axis in ("num_heads", "batch_size", "isl", "step"):
        drops = pairs = 0
        for _, g in d.groupby([k for k in KEYS if k != axis]):
            lat = g.sort_values(axis).latency.to_numpy(dtype=float)
            ratio = lat[1:] / lat[:-1]
            pairs, drops = pairs + ratio.size, drops + int((ratio < 0.9).sum())
        cells.append(f"{drops} of {pairs}")
    return f"| {gpu} | {len(d)} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default=",".join(GPUS))
    ap.add_argument("--consistency", action="store_true", help="the tables' repeated shapes and non-monotone steps")
    ap.add_argument("--check", action="store_true", help="the whole tables: every judged row returned exactly")
    args = ap.parse_args()
    gpus = args.gpus.split(",")
    if args.consistency:
        print("| GPU | rows | repeated shapes | drops > 10 % along heads | batch | isl | step |")
        print("|---|---|---|---|---|---|---|")
        for gpu in gpus:
            print(consistency(gpu))
        return
    print("| GPU | phase | median | p90 | rows |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.check:
            reduced_systems(Path(tmp))
        for gpu in gpus:
            d = module_table(gpu)
            rows = d if args.check else d[d.held_out]
            err = np.abs(peer_s(None if args.check else tmp, gpu, rows) / rows.measured_s.to_numpy() - 1.0)
            for phase in ("context", "generation", "all"):
                e = err if phase == "all" else err[(rows.phase == phase).to_numpy()]
                print(f"| {gpu} | {phase} | {100 * np.median(e):.1f} % | {100 * np.percentile(e, 90):.1f} % | "
                      f"{e.size} |")


if __name__ == "__main__":
    main()
