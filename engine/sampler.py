"""Token sampling from the logits of one step: greedy, temperature, top-k, top-p, per-request seeds.

Greedy rows (temperature 0) are one batched argmax. The other rows are scaled by their temperature, filtered
(top-k, top-p; row by row, only where asked) and drawn: rows without a seed in one `multinomial` call from the
engine's generator (seeded once from the engine seed), rows with a seed each from its request's own generator,
so that its tokens do not depend on what else is in the batch (as in vLLM).

    sampler = Sampler(seed=0)
    greedy, seeded = SamplingParams(temperature=0), SamplingParams(temperature=0.8, seed=7)
    tokens = sampler.sample(logits, ["r0", "r1"], [greedy, seeded])     # logits: [2, vocab] fp32
    sampler.forget("r0")                     # when r0 finishes
"""

from __future__ import annotations

import torch

from engine.core.request import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """[V] fp32 logits with the tokens outside top-k and outside the top-p nucleus set to -inf
    (vLLM's conventions: top_k 0 and top_p 1 are off)."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens before it already hold top_p of the mass; the first always stays.
        drop = probs.cumsum(-1) - probs > top_p
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


class Sampler:
    def __init__(self, seed: int) -> None:
        self._generator = torch.Generator().manual_seed(seed)
        self._request_generators: dict[str, torch.Generator] = {}

    def sample(self, logits: torch.Tensor, request_ids: list[str], options: list[SamplingParams]) -> list[int]:
        """logits: [n, V] fp32, row i for request_ids[i] -> one token id per row."""
        tokens = logits.argmax(dim=-1).tolist()
        random_rows = [i for i, o in enumerate(options) if o.temperature > 0]
        if not random_rows:
            return tokens
        temperatures = torch.tensor([options[i].temperature for i in random_rows], dtype=torch.float32)
        rows = logits[random_rows].cpu() / temperatures[:, None]
        for j, i in enumerate(random_rows):
            if options[i].top_k > 0 or options[i].top_p < 1.0:
                rows[j] = filter_logits(rows[j], options[i].top_k, options[i].top_p)
        probs = rows.softmax(dim=-1)
        shared = [j for j, i in enumerate(random_rows) if options[i].seed is None]
        if shared:  # one draw for all rows without a seed of their own
            drawn = torch.multinomial(probs[shared], 1, generator=self._generator)[:, 0].tolist()
            for j, token in zip(shared, drawn):
                tokens[random_rows[j]] = token
        for j, i in enumerate(random_rows):
            if options[i].seed is not None:
                generator = self._request_generator(request_ids[i], options[i].seed)
                tokens[i] = int(torch.multinomial(probs[j], 1, generator=generator).item())
        return tokens

    def forget(self, request_id: str) -> None:
        self._request_generators.pop(request_id, None)

    def _request_generator(self, request_id: str, seed: int) -> torch.Generator:
        if request_id not in self._request_generators:
            self._request_generators[request_id] = torch.Generator().manual_seed(seed)
        return self._request_generators[request_id]
