"""The object store: one process per host holding objects in shared memory, spilling to disk, serving peers.

segment.py (memfd segments), spill.py (unlinked files), store_core.py (the decisions), server.py (the
process's sockets), store_client.py (what clients and processors call), __main__.py (its command line).
"""
