"""ModelRunner: one `StepPlan` of the scheduler -> one forward pass over the paged KV cache -> sampled tokens.

The runner owns the model, the KV cache and the sampler. It reorders the plan's sequences so that the
single-token ones (decodes) come first and prefill chunks after (see `engine.attention`), computes logits
only for the sequences that emit a token, and returns `{request_id: token}` for them. Its three phases are
separate methods so the engine can time them apart:

    runner = ModelRunner(model, kv_cache, sampler, device)
    batch = runner.prepare(plan)                  # host: input tensors and attention metadata
    logits = runner.forward(batch)                # device: the model (call `synchronize` before timing)
    sampled = runner.sample(batch, logits)       # {request_id: token} for the seqs that emit one
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention import AttentionMetadata, PagedKVCache, build_metadata
from engine.core.request import Request
from engine.core.scheduler import StepPlan
from engine.model import LlamaModel
from engine.sampler import Sampler


@dataclass(frozen=True)
class StepBatch:
    """The model inputs of one step."""

    input_ids: torch.Tensor  # [num_tokens] long
    positions: torch.Tensor  # [num_tokens] long
    meta: AttentionMetadata
    logit_rows: torch.Tensor  # [num_emitting] long: the rows whose hidden state is sampled
    emitting: list[Request]  # in logit_rows order


class ModelRunner:
    def __init__(self, model: LlamaModel, kv_cache: PagedKVCache, sampler: Sampler, device: torch.device) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.sampler = sampler
        self.device = device

    def prepare(self, plan: StepPlan) -> StepBatch:
        """Input tensors and attention metadata for the plan (read from its columns)."""
        rows = list(zip(plan.requests, plan.query_lens, plan.context_lens, plan.emits, plan.block_tables))
        ordered = [r for r in rows if r[1] == 1] + [r for r in rows if r[1] > 1]  # decodes first
        input_ids: list[int] = []
        positions: list[int] = []
        logit_rows: list[int] = []
        emitting: list[Request] = []
        for req, num_query, num_context, emits, _ in ordered:
            input_ids.extend(req.token_ids(num_context, num_context + num_query))
            positions.extend(range(num_context, num_context + num_query))
            if emits:
                logit_rows.append(len(input_ids) - 1)
                emitting.append(req)
        num_decodes = sum(1 for r in rows if r[1] == 1)
        meta = build_metadata([(table, ctx) for _, _, ctx, _, table in ordered[:num_decodes]],
                              [(table, ctx, q) for _, q, ctx, _, table in ordered[num_decodes:]],
                              self.kv_cache, self.device)

        def as_tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=self.device)

        return StepBatch(as_tensor(input_ids), as_tensor(positions), meta, as_tensor(logit_rows), emitting)

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        """-> [num_emitting, vocab] fp32 logits."""
        hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_cache)
        return self.model.compute_logits(hidden[batch.logit_rows])

    @torch.inference_mode()
    def sample(self, batch: StepBatch, logits: torch.Tensor) -> dict[str, int]:
        ids = [r.request_id for r in batch.emitting]
        tokens = self.sampler.sample(logits, ids, [r.sampling for r in batch.emitting])
        return dict(zip(ids, tokens))

    def execute(self, plan: StepPlan) -> dict[str, int]:
        """prepare + forward + sample, untimed."""
        batch = self.prepare(plan)
        return self.sample(batch, self.forward(batch))

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
