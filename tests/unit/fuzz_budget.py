"""How many examples the property and state-machine tests draw: the number each test names, as CI runs it in
its share of the suite's 15 minutes, times SCALER_FUZZ_SCALE (default 1) for a deeper run by hand, e.g.
`SCALER_FUZZ_SCALE=10 .venv/bin/python -m pytest tests/unit -k fuzz`."""

from __future__ import annotations

import os

_SCALE = float(os.environ.get("SCALER_FUZZ_SCALE", "1"))


def examples(count: int) -> int:
    return max(1, round(count * _SCALE))
