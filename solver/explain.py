"""Why the limits cannot all be met: each broken limit against the least value reachable."""
from __future__ import annotations

from models.instance import Instance
from solver.bounds import bucket_bounds


def explain_infeasible(cfg, requests, result) -> list[str]:
    """One line per broken limit of `result` (the best plan found)."""
    inst = Instance(cfg, requests)
    lines = []
    k = cfg.shapes.max_unique
    for name, m in result.metrics.items():
        broken = m.broken()
        if not broken:
            continue
        bounds = bucket_bounds(inst, name)
        limits = result.limits_of[name]
        for key in broken:
            limit, got = limits[key], getattr(m, key)
            least = getattr(bounds, key)
            if least > limit * (1 + 1e-12):
                lines.append(f"{name}: {key} {limit:.6g} cannot be met with {k} shapes: the least reachable is "
                             f"{least:.6g}")
            else:
                others = [o for o in limits if o != key]
                lines.append(f"{name}: {key} {limit:.6g} conflicts with {', '.join(others) or 'the batch limits'}: "
                             f"alone it could reach {least:.6g}, but the {result.method} plan reaches {got:.6g}")
    return lines
