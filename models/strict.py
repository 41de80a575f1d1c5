"""Config numbers are plain, finite and of range: the base of every config section (models/config.py,
models/engine.py)."""
from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, model_validator

INT64 = 2 ** 63
FLOAT_MAX = 1e30            # any float key, in magnitude: products of several stay finite


def plain_number(key: str, value) -> None:
    """ValueError for a boolean, a non-finite or huge float, or an integer outside int64 (walks lists and maps)."""
    if isinstance(value, bool):
        raise ValueError(f"{key}={value!r} must be a number, not a boolean")
    if isinstance(value, int) and not -INT64 <= value < INT64:
        raise ValueError(f"{key}={value!r} is out of range (integers must fit in 64 bits: below 2**63)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{key}={value!r} must be a finite number (null means no limit where a key allows it)")
    if isinstance(value, float) and abs(value) > FLOAT_MAX:
        raise ValueError(f"{key}={value!r} is out of range (at most {FLOAT_MAX:g} in magnitude)")
    if isinstance(value, (list, tuple)):
        for item in value:
            plain_number(key, item)
    if isinstance(value, dict):
        for name, item in value.items():
            plain_number(f"{key}.{name}", item)


class Strict(BaseModel):
    """Base: unknown keys are errors, values are validated on assignment too; every number is a plain,
    finite number of range (no booleans for numbers, ints fit in int64)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data):
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if field is not None and re.search(r"\b(int|float)\b", str(field.annotation)):
                    plain_number(key, value)
        return data
