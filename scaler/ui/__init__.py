"""Views of a running cluster, fed by the scheduler's monitor feed: `scaler_top` (terminal) and `scaler_ui` (web)."""
