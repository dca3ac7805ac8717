"""The object store: one process per host holding objects in shared memory, spilling to disk, serving peers.

The decisions: store_core.py (the state machine), store_actions.py (what it asks the shell to do),
store_records.py (what it remembers), segment_pool.py (recycled segments by size). The process:
server.py (its sockets), server_config.py (what it is started with), segment.py (memfd segments),
spill.py (unlinked files), holder_fetches.py (fetching from other stores), process_watch.py (local
readers that die), scheduler_link.py (the seam to the scheduler) and control_link.py (that link over
the control protocol), scaler/cli/store.py (its command line), store_process.py (starting one). For the other
processes: store_client.py.
"""
