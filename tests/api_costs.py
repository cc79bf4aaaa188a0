"""API-server costs for tests: every `ApiServerCosts` field zero but the ones a test names, so that a test sees
one cost alone."""

from dataclasses import fields

from roofline.sim.api_server import ApiServerCosts


def only(**costs: float) -> ApiServerCosts:
    """`ApiServerCosts` with `costs` (seconds, by field name) and every other field 0."""
    return ApiServerCosts(**{**{f.name: 0.0 for f in fields(ApiServerCosts)}, **costs})
