"""Configuration of the scheduler and the KV cache, named and defaulted as vLLM V1 names them.

    sched = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=4096)
    cache = CacheConfig(num_blocks=4096, block_size=16)

Defaults follow `vllm/config/scheduler.py` and `vllm/config/cache.py` of vLLM 0.32.0: chunked prefill and
prefix caching on, `long_prefill_token_threshold` 0 (off), `scheduler_reserve_full_isl` on, no watermark.
Invalid values raise `ValueError` naming the field and the allowed values; the checks vLLM makes across fields
(`SchedulerConfig.verify_max_model_len`) are made here too, with vLLM's wording of the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("fcfs", "priority")


def _require_positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class SchedulerConfig:
    """Batching limits of one engine instance (vLLM's `SchedulerConfig` plus `max_model_len`)."""

    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"
    # A running or waiting request computes at most this many tokens per step when more than one request
    # is eligible; 0 disables the cap (vLLM default since max_num_partial_prefills is 1).
    long_prefill_token_threshold: int = 0
    # Admit a waiting request only if its whole sequence (not just the first chunk) fits in free blocks.
    scheduler_reserve_full_isl: bool = True
    # Fraction of all KV blocks kept free when admitting waiting/preempted requests.
    watermark: float = 0.0

    def __post_init__(self) -> None:
        _require_positive(
            "SchedulerConfig",
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
        )
        if self.policy not in POLICIES:
            raise ValueError(f"SchedulerConfig.policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not isinstance(self.long_prefill_token_threshold, int) or not (
            0 <= self.long_prefill_token_threshold <= self.max_model_len
        ):
            raise ValueError(
                "SchedulerConfig.long_prefill_token_threshold must be an integer in [0, max_model_len="
                f"{self.max_model_len}], got {self.long_prefill_token_threshold!r}"
            )
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"SchedulerConfig.watermark must be in [0, 1), got {self.watermark!r}")
        # The same cross-field checks as vLLM's SchedulerConfig.verify_max_model_len.
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"SchedulerConfig.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_model_len "
                f"({self.max_model_len}) when chunked prefill is disabled"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"SchedulerConfig.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs})"
            )


@dataclass(frozen=True)
class CacheConfig:
    """The paged KV cache: `num_blocks` blocks of `block_size` tokens each.

    `num_blocks` counts like vLLM's `num_gpu_blocks`: block 0 is reserved as the null block, so
    `num_blocks - 1` blocks hold KV.
    """

    num_blocks: int
    block_size: int = 16
    enable_prefix_caching: bool = True
    # A hybrid model's sliding-window KV groups (vLLM's hybrid allocator: every group draws its blocks from the
    # one pool): how many, their window in tokens, and the blocks one request may reserve in each at admission
    # (`SlidingWindowSpec.max_admission_blocks_per_request`). 0 groups: every layer in the one full-attention table.
    num_sliding_groups: int = 0
    sliding_window: int = 0
    sliding_admission_cap_blocks: int = 0

    def __post_init__(self) -> None:
        _require_positive("CacheConfig", num_blocks=self.num_blocks, block_size=self.block_size)
        if self.num_sliding_groups:
            _require_positive("CacheConfig", num_sliding_groups=self.num_sliding_groups,
                              sliding_window=self.sliding_window,
                              sliding_admission_cap_blocks=self.sliding_admission_cap_blocks)
        elif self.sliding_window or self.sliding_admission_cap_blocks:
            raise ValueError("CacheConfig.sliding_window and sliding_admission_cap_blocks need num_sliding_groups > 0, "
                             f"got num_sliding_groups={self.num_sliding_groups!r}")
        if self.num_blocks < 2:
            raise ValueError(
                f"CacheConfig.num_blocks must be >= 2 (block 0 is the reserved null block), got {self.num_blocks}"
            )

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1
