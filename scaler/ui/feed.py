"""Where the views and docs/monitor.md import the monitor feed's subscriber from; it lives in
scaler/protocol/monitor_feed.py, below the adapters, whose adaptive scaler reads the feed too."""

from scaler.protocol.monitor_feed import MonitorSubscriber

__all__ = ["MonitorSubscriber"]
