"""Where the lifetime of every object is decided: here, in the scheduler's core. Everyone else obeys.

    object_table.py   An object (a function, a serializer, a send_object() value, a shared argument, a
                      stored result) lives while a client owns it or an unfinished task uses it. When it
                      is freed, the workers that were sent it and the stores that hold it are told to
                      delete it (deleteObjects).
    lineage.py        When the last holder of a stored object is gone: a result still needed is made
                      again from the task that made it, a client object is asked for again.

What the other processes keep, and until when, each in one place:

    client   scaler/client/sent_objects.py       what it stored, to send again if the store is lost,
                                                  until it deletes the object (or clears, or leaves)
             scaler/client/shared_arguments.py   a large argument shared by tasks: deleted with its last task
    worker   scaler/worker/task_objects.py       the objects a processor was sent, until deleteObjects
             scaler/worker/own_results.py        the large results a processor made: values for the
                                                  dependents placed there, bytes written when asked
    store    scaler/store/store_core.py          an object's bytes, until the scheduler (or, standalone,
                                                  its writer) deletes it
             scaler/store/recent_deletes.py      a delete that overtook a late write
             scaler/store/lent_objects.py        the bytes a writer lends, alive until it lets them go
"""
