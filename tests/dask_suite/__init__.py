"""dask's own test modules, run through `scaler.get` by a pytest plugin (see plugin.py)."""
