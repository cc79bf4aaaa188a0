"""GPU prices: the shipped defaults (`hardware_profiles/prices.yaml`, each with its source and date) and the
`--price ID=USD_PER_GPU_HOUR` overrides."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.errors import UserError
from roofline.registry import data_file
from roofline.yaml_file import read_yaml


@dataclass(frozen=True)
class Price:
    usd_per_gpu_hour: float
    offer: str  # what exactly is priced
    source: str  # where the number comes from (a URL, or "--price")
    read_on: str  # the date it was read, ISO ("" for --price)


PRICES_PATH = data_file("hardware_profiles", "prices.yaml")
_PRICE_FIELDS = ("usd_per_gpu_hour", "offer", "source", "read_on", "via")


def load_prices(path: Path = PRICES_PATH) -> dict[str, Price]:
    """The shipped default prices by hardware id (see hardware_profiles/prices.yaml for their sources)."""
    raw: dict[str, Any] = read_yaml(path) or {}
    prices = {}
    for hw, entry in raw.items():
        where = f"{path}: {hw}"
        if not isinstance(entry, dict) or set(entry) != set(_PRICE_FIELDS):
            raise UserError(f"{where}: needs exactly the fields {', '.join(_PRICE_FIELDS)}")
        usd = entry["usd_per_gpu_hour"]
        if isinstance(usd, bool) or not isinstance(usd, (int, float)) or usd <= 0:
            raise UserError(f"{where}.usd_per_gpu_hour: must be a positive number, got {usd!r}")
        prices[str(hw)] = Price(float(usd), str(entry["offer"]), str(entry["source"]), str(entry["read_on"]))
    return prices


def parse_price_flags(values: list[str]) -> dict[str, float]:
    """`--price ID=USD_PER_HOUR` values -> {id: usd per GPU-hour}."""
    out: dict[str, float] = {}
    for text in values:
        hw, sep, usd = text.partition("=")
        try:
            value = float(usd)
        except ValueError:
            value = math.nan
        if not sep or not hw.strip() or not (value > 0 and math.isfinite(value)):
            raise UserError(f"--price: expected ID=USD_PER_GPU_HOUR with a positive number, got '{text}'")
        out[hw.strip()] = value
    return out


def prices_for(hardware: tuple[str, ...], overrides: dict[str, float],
               defaults: dict[str, Price] | None = None) -> dict[str, Price | None]:
    """The price of every planned hardware: a --price override, else the shipped default for its id (the
    file stem when a path is given), else None (the plan ranks it by GPUs and says so). A --price for hardware
    not planned is an error, not ignored."""
    defaults = load_prices() if defaults is None else defaults
    unknown = sorted(set(overrides) - set(hardware))
    if unknown:
        raise UserError(f"--price: '{unknown[0]}' is not among --hardware ({', '.join(hardware)})")
    prices: dict[str, Price | None] = {}
    for hw in hardware:
        if hw in overrides:
            prices[hw] = Price(overrides[hw], "user-given", "--price", "")
            continue
        prices[hw] = defaults.get(Path(hw).stem.lower())
    return prices
