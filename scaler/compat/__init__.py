"""Adapters that let dask, joblib and concurrent.futures code run on Scaler with one line."""
