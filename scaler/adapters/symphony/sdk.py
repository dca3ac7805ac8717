"""IBM Spectrum Symphony's Python SDK (`soamapi`), as the Symphony worker uses it: a session, messages, callbacks.

The SDK is proprietary and ships with Symphony, not on PyPI: `load_soamapi` says what to install when it
is missing. Everything the worker calls on the SDK is in this module, so what it relies on is in one place:

- `soamapi.initialize()`, `soamapi.connect(application, soamapi.DefaultSecurityCallback(user, password))`,
  `connection.create_session(attributes)`, `session.send_task_input(attributes).get_id()`,
  `session.close()`, `connection.close()`, `soamapi.uninitialize()`;
- `soamapi.SessionCreationAttributes` (`set_session_name`, `set_session_type`, `set_session_flags`,
  `set_session_callback`), `soamapi.SessionFlags.PARTIAL_ASYNC`, `soamapi.TaskSubmissionAttributes`
  (`set_task_input`);
- a `soamapi.SessionCallback` whose `on_response(task_output_handle)` reads `get_id()`, `is_successful()`,
  `populate_task_output(message)` or `get_exception()` (and its `get_embedded_exception()`), and whose
  `on_exception(exception)` hears that the session broke;
- a `soamapi.Message` whose `on_serialize(stream)` / `on_deserialize(stream)` use
  `stream.write_byte_array(array, 0, length)` / `stream.read_byte_array("b")`, as document 004's
  service does.
"""

from __future__ import annotations

import array
import importlib
import sys
import threading
from types import ModuleType
from typing import Any, Callable


class SymphonySdkMissing(ImportError):
    pass


def load_soamapi() -> ModuleType:
    """The `soamapi` module, or SymphonySdkMissing saying what to install."""
    try:
        return importlib.import_module("soamapi")
    except ImportError as error:
        raise SymphonySdkMissing(
            "IBM Spectrum Symphony's Python SDK (the `soamapi` module) is not installed in this Python "
            f"({sys.executable}): install the soamapi package that comes with your Symphony client "
            "installation (see IBM's 'Symphony Python API' documentation; it is not on PyPI) into this "
            f"environment, and run this where a Symphony client is configured ({error})"
        ) from None


class SymphonySession:
    """One Symphony connection and session that sends task payloads and hands answers to `on_outcome`.

    `on_outcome(symphony_task_id, payload, exception)` is called from the SDK's threads with either
    the output bytes or the exception; `on_broken(exception)` when the session fails as a whole.
    """

    def __init__(
        self,
        application: str,
        user: str,
        password: str,
        session_name: str,
        session_type: str | None,
        on_outcome: Callable[[str, bytes | None, BaseException | None], None],
        on_broken: Callable[[BaseException], None],
    ) -> None:
        soamapi = self._soamapi = load_soamapi()
        self._message_class = _message_class(soamapi)
        message_class = self._message_class

        class Callback(soamapi.SessionCallback):  # type: ignore[name-defined,misc]
            def on_response(self, task_output_handle: Any) -> None:
                task_id = str(task_output_handle.get_id())
                try:
                    if task_output_handle.is_successful():
                        output = message_class()
                        task_output_handle.populate_task_output(output)
                        on_outcome(task_id, bytes(output.get_payload()), None)
                    else:
                        on_outcome(task_id, None, _original_exception(task_output_handle.get_exception()))
                except Exception as error:  # an answer we cannot read is that task's failure, not the SDK's
                    on_outcome(task_id, None, error)

            def on_exception(self, exception: Any) -> None:
                on_broken(exception if isinstance(exception, BaseException) else RuntimeError(str(exception)))

        self._lock = threading.Lock()
        soamapi.initialize()
        try:
            self._connection = soamapi.connect(application, soamapi.DefaultSecurityCallback(user, password))
            attributes = soamapi.SessionCreationAttributes()
            attributes.set_session_name(session_name)
            if session_type:
                attributes.set_session_type(session_type)
            attributes.set_session_flags(soamapi.SessionFlags.PARTIAL_ASYNC)
            self._callback = Callback()
            attributes.set_session_callback(self._callback)
            self._session = self._connection.create_session(attributes)
        except BaseException:
            soamapi.uninitialize()
            raise
        self.connection_id = str(self._connection.get_id())
        self.session_id = str(self._session.get_id())

    def send(self, payload: bytes) -> str:
        """Send one task's input; returns Symphony's task id."""
        attributes = self._soamapi.TaskSubmissionAttributes()
        attributes.set_task_input(self._message_class(payload))
        with self._lock:
            return str(self._session.send_task_input(attributes).get_id())

    def close(self) -> None:
        try:
            self._session.close()
        finally:
            try:
                self._connection.close()
            finally:
                self._soamapi.uninitialize()


def _original_exception(exception: Any) -> BaseException:
    """What the service raised, where the SDK keeps it (`get_embedded_exception`), else its own exception."""
    getter = getattr(exception, "get_embedded_exception", None)
    embedded = getter() if callable(getter) else None
    if isinstance(embedded, BaseException):
        return embedded
    return exception if isinstance(exception, BaseException) else RuntimeError(str(exception))


def _message_class(soamapi: ModuleType) -> type:
    """The message of document 004's service: one byte array."""

    class Message(soamapi.Message):  # type: ignore[name-defined,misc]
        def __init__(self, payload: bytes = b"") -> None:
            self._payload = payload

        def set_payload(self, payload: bytes) -> None:
            self._payload = payload

        def get_payload(self) -> bytes:
            return self._payload

        def on_serialize(self, stream: Any) -> None:
            payload = array.array("b", self._payload)
            stream.write_byte_array(payload, 0, len(payload))

        def on_deserialize(self, stream: Any) -> None:
            self._payload = bytes(stream.read_byte_array("b"))

    return Message
