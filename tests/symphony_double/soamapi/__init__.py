"""A TEST DOUBLE of IBM Spectrum Symphony's Python SDK, `soamapi`. It is not IBM's code and contains none of it.

It mimics, from IBM's documentation of the Symphony Python API and from document 004's service example,
the part of the API that `scaler_symphony_cluster` (scaler/adapters/symphony/sdk.py) and the service
container (examples/symphony/scaler_service.py) use:

- client side: `initialize()`, `uninitialize()`, `connect(application, DefaultSecurityCallback(user,
  password))` returning a connection with `get_id()`, `create_session(SessionCreationAttributes)` and
  `close()`; `SessionCreationAttributes.set_session_name/set_session_type/set_session_flags/
  set_session_callback`; `SessionFlags.PARTIAL_ASYNC`; a session with `get_id()`,
  `send_task_input(TaskSubmissionAttributes)` (returning a handle with `get_id()`) and `close()`;
  `SessionCallback.on_response(task_output_handle)` with `get_id()`, `is_successful()`,
  `populate_task_output(message)` and `get_exception()` (a `SoamException` whose
  `get_embedded_exception()` is what the service raised), and `SessionCallback.on_exception(exception)`;
- both sides: `Message` with `on_serialize(stream)` / `on_deserialize(stream)`, the streams offering
  `write_byte_array(array, offset, length)` and `read_byte_array(type_code)` (an `array.array`);
- service side: `ServiceContainer` with `on_create_service`, `on_session_enter`,
  `on_invoke(task_context)`, `on_session_leave`, `on_destroy_service` and `run()`;
  `task_context.populate_task_input(message)` and `set_task_output(message)`.

How the real SDK behaves beyond what those documents say (its threads, how a service's exception
reaches the client) is assumed here, not known: the double calls the session callback from its own
threads, one at a time per slot, and embeds the service's exception as it was raised.

Symphony itself is played by `SOAMAPI_DOUBLE_SLOTS` (default 2) service-instance processes on this
machine, like Symphony's service instance managers: each runs the service module registered for the
application in `SOAMAPI_DOUBLE_SERVICES` ("Application=/path/to/service.py", comma-separated), with this
package first on its path, and serves one task at a time; tasks wait in order for a free instance.
"""

from __future__ import annotations

import array
import itertools
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import Any

SERVICES_VARIABLE = "SOAMAPI_DOUBLE_SERVICES"
SLOTS_VARIABLE = "SOAMAPI_DOUBLE_SLOTS"
_CHANNEL_VARIABLE = "SOAMAPI_DOUBLE_CHANNEL"  # "<read fd>,<write fd>" of a service instance
_HEADER = struct.Struct("<cI")  # kind, length
_INPUT, _OUTPUT, _FAILURE = b"I", b"O", b"F"
_STOP_SECONDS = 10.0

_initialized = False
_ids = itertools.count(1)


class SoamException(Exception):
    def __init__(self, message: str, embedded: BaseException | None = None) -> None:
        super().__init__(message)
        self._embedded = embedded

    def get_embedded_exception(self) -> BaseException | None:
        return self._embedded


def initialize() -> None:
    global _initialized
    _initialized = True


def uninitialize() -> None:
    global _initialized
    _initialized = False


class DefaultSecurityCallback:
    def __init__(self, user_name: str, password: str) -> None:
        self.user_name = user_name
        self.password = password


class SessionFlags:
    PARTIAL_ASYNC = 1
    RECEIVE_ASYNC = 2
    RECEIVE_SYNC = 4


class SessionCallback:
    def on_response(self, task_output_handle: TaskOutputHandle) -> None:
        pass

    def on_exception(self, exception: SoamException) -> None:
        pass


class Message:
    def on_serialize(self, stream: OutputStream) -> None:
        raise NotImplementedError

    def on_deserialize(self, stream: InputStream) -> None:
        raise NotImplementedError


class OutputStream:
    def __init__(self) -> None:
        self.data = bytearray()

    def write_byte_array(self, values: array.array, offset: int, length: int) -> None:
        if not isinstance(values, array.array):
            raise TypeError(f"write_byte_array takes an array.array, got {type(values).__name__}")
        self.data += values[offset:offset + length].tobytes()


class InputStream:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read_byte_array(self, type_code: str) -> array.array:
        return array.array(type_code, self._data)


def _serialize(message: Message) -> bytes:
    stream = OutputStream()
    message.on_serialize(stream)
    return bytes(stream.data)


class SessionCreationAttributes:
    def __init__(self) -> None:
        self.name = ""
        self.type = ""
        self.flags = 0
        self.callback: SessionCallback | None = None

    def set_session_name(self, name: str) -> None:
        self.name = name

    def set_session_type(self, session_type: str) -> None:
        self.type = session_type

    def set_session_flags(self, flags: int) -> None:
        self.flags = flags

    def set_session_callback(self, callback: SessionCallback) -> None:
        self.callback = callback


class TaskSubmissionAttributes:
    def __init__(self) -> None:
        self.input: Message | None = None

    def set_task_input(self, message: Message) -> None:
        self.input = message


class TaskInputHandle:
    def __init__(self, task_id: str) -> None:
        self._task_id = task_id

    def get_id(self) -> str:
        return self._task_id


class TaskOutputHandle:
    def __init__(self, task_id: str, output: bytes | None, exception: SoamException | None) -> None:
        self._task_id = task_id
        self._output = output
        self._exception = exception

    def get_id(self) -> str:
        return self._task_id

    def is_successful(self) -> bool:
        return self._exception is None

    def populate_task_output(self, message: Message) -> None:
        if self._output is None:
            raise SoamException("the task failed: it has no output")
        message.on_deserialize(InputStream(self._output))

    def get_exception(self) -> SoamException | None:
        return self._exception


def connect(application_name: str, security_callback: DefaultSecurityCallback) -> Connection:
    if not _initialized:
        raise SoamException("soamapi.initialize() was not called")
    if not isinstance(security_callback, DefaultSecurityCallback):
        raise SoamException("connect needs a security callback")
    services = dict(
        entry.split("=", 1) for entry in os.environ.get(SERVICES_VARIABLE, "").split(",") if "=" in entry
    )
    if application_name not in services:
        raise SoamException(f"application {application_name!r} is not registered (known: {sorted(services)})")
    return Connection(services[application_name])


class Connection:
    def __init__(self, service_path: str) -> None:
        self._service_path = service_path
        self._id = f"connection-{next(_ids)}"
        self._sessions: list[Session] = []

    def get_id(self) -> str:
        return self._id

    def create_session(self, attributes: SessionCreationAttributes) -> Session:
        if attributes.flags & SessionFlags.PARTIAL_ASYNC and attributes.callback is None:
            raise SoamException("an asynchronous session needs a session callback")
        session = Session(self._service_path, attributes, int(os.environ.get(SLOTS_VARIABLE, "2")))
        self._sessions.append(session)
        return session

    def close(self) -> None:
        for session in self._sessions:
            session.close()


class Session:
    def __init__(self, service_path: str, attributes: SessionCreationAttributes, slots: int) -> None:
        self._service_path = service_path
        self._callback = attributes.callback
        self._id = str(next(_ids))
        self._task_ids = itertools.count(1)
        self._inputs: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._instances: list[_ServiceInstance] = []
        self._threads = [
            threading.Thread(target=self._serve, name=f"soamapi-double-slot-{slot}", daemon=True)
            for slot in range(slots)
        ]
        self._closed = False
        for thread in self._threads:
            thread.start()

    def get_id(self) -> str:
        return self._id

    def send_task_input(self, attributes: TaskSubmissionAttributes) -> TaskInputHandle:
        if self._closed:
            raise SoamException("the session is closed")
        if attributes.input is None:
            raise SoamException("the task has no input message")
        task_id = str(next(self._task_ids))
        self._inputs.put((task_id, _serialize(attributes.input)))
        return TaskInputHandle(task_id)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._inputs.put(None)
        for thread in self._threads:
            thread.join(_STOP_SECONDS)
        with self._lock:
            instances = list(self._instances)
        for instance in instances:
            instance.stop()

    def _serve(self) -> None:
        instance: _ServiceInstance | None = None
        while True:
            item = self._inputs.get()
            if item is None:
                return
            task_id, payload = item
            if instance is None or not instance.alive():
                instance = _ServiceInstance(self._service_path)
                with self._lock:
                    self._instances.append(instance)
            output, exception = instance.invoke(payload)
            if self._callback is not None and not self._closed:
                self._callback.on_response(TaskOutputHandle(task_id, output, exception))


class _ServiceInstance:
    """One service process: runs the service module, which calls ServiceContainer().run()."""

    def __init__(self, service_path: str) -> None:
        to_service_read, to_service_write = os.pipe()
        from_service_read, from_service_write = os.pipe()
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [here, environment.get("PYTHONPATH", "")]))
        environment[_CHANNEL_VARIABLE] = f"{to_service_read},{from_service_write}"
        self._process = subprocess.Popen(
            [sys.executable, service_path], env=environment, stdin=subprocess.DEVNULL,
            pass_fds=(to_service_read, from_service_write),
        )
        os.close(to_service_read)
        os.close(from_service_write)
        self._to_service = os.fdopen(to_service_write, "wb")
        self._from_service = os.fdopen(from_service_read, "rb")

    def alive(self) -> bool:
        return self._process.poll() is None

    def invoke(self, payload: bytes) -> tuple[bytes | None, SoamException | None]:
        try:
            _write_frame(self._to_service, _INPUT, payload)
            kind, body = _read_frame(self._from_service)
        except (OSError, EOFError):
            code = self._process.wait()
            return None, SoamException(f"the service instance exited with code {code} while running the task")
        if kind == _OUTPUT:
            return body, None
        try:
            embedded, text = pickle.loads(body)
        except Exception:
            embedded, text = None, "the service raised an exception that could not be unpickled"
        return None, SoamException(f"the service failed: {text}", embedded)

    def stop(self) -> None:
        for stream in (self._to_service, self._from_service):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self._process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _write_frame(stream: Any, kind: bytes, body: bytes) -> None:
    stream.write(_HEADER.pack(kind, len(body)))
    stream.write(body)
    stream.flush()


def _read_frame(stream: Any) -> tuple[bytes, bytes]:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the channel closed")
    kind, length = _HEADER.unpack(header)
    body = stream.read(length)
    if len(body) < length:
        raise EOFError("the channel closed")
    return kind, body


# ---------------------------------------------------------------------------------------------- service side


class ServiceContext:
    pass


class SessionContext:
    pass


class TaskContext:
    def __init__(self, payload: bytes) -> None:
        self._payload = payload
        self.output: bytes | None = None

    def populate_task_input(self, message: Message) -> None:
        message.on_deserialize(InputStream(self._payload))

    def set_task_output(self, message: Message) -> None:
        self.output = _serialize(message)


class ServiceContainer:
    def on_create_service(self, service_context: ServiceContext) -> None:
        pass

    def on_session_enter(self, session_context: SessionContext) -> None:
        pass

    def on_invoke(self, task_context: TaskContext) -> None:
        pass

    def on_session_leave(self) -> None:
        pass

    def on_destroy_service(self) -> None:
        pass

    def run(self) -> None:
        """Serve the tasks the double's session sends, one at a time, until it closes the channel."""
        import traceback

        read_fd, write_fd = (int(fd) for fd in os.environ[_CHANNEL_VARIABLE].split(","))
        incoming, outgoing = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
        _exit_with_parent()
        self.on_create_service(ServiceContext())
        self.on_session_enter(SessionContext())
        while True:
            try:
                _, payload = _read_frame(incoming)
            except EOFError:
                break
            context = TaskContext(payload)
            try:
                self.on_invoke(context)
                if context.output is None:
                    raise SoamException("on_invoke set no task output")
            except BaseException as error:
                text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
                try:  # cloudpickle when the service has it: exceptions of classes made in __main__ travel too
                    import cloudpickle

                    body = cloudpickle.dumps((error, text))
                except Exception:
                    body = pickle.dumps((None, text))
                _write_frame(outgoing, _FAILURE, body)
                continue
            _write_frame(outgoing, _OUTPUT, context.output)
        self.on_session_leave()
        self.on_destroy_service()


def _exit_with_parent() -> None:
    """A service instance must not outlive its session's process, even in the middle of a task."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="soamapi-double-parent-watch", daemon=True).start()
