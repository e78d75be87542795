"""The largest errors the tests saw, merged into the JSON file named by $SDMP1_ERROR_REPORT."""

from __future__ import annotations

import json
import os


def merge_error_report(section: str, payload: dict) -> None:
    """Stores `payload` under `section` in $SDMP1_ERROR_REPORT (kept sections stay); no-op
    when the variable is unset."""
    path = os.environ.get("SDMP1_ERROR_REPORT")
    if not path:
        return
    data = {}
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
    data[section] = payload
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
