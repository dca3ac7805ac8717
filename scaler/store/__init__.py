"""The object store: one process per host holding objects in shared memory, spilling to disk, serving peers.

segment.py (memfd segments), spill.py (unlinked files), store_core.py (the decisions), server.py (the
process's sockets), server_config.py (what it is started with), scheduler_link.py (the seam to the
scheduler) and control_link.py (that link over the control protocol), store_client.py (what clients and
processors call), store_process.py (starting one), __main__.py (its command line).
"""
