"""The IBM Spectrum Symphony service that runs Scaler tasks for `scaler_symphony_cluster` (document 004).

Deploy it as the service of a Symphony application (say ScalerService) whose hosts have Python, IBM's
soamapi SDK and cloudpickle (and scaler, if tasks submit nested tasks), then run:

    scaler_symphony_cluster tcp://SCHEDULER:2345 ScalerService --base-concurrency 4

Each task's input is `cloudpickle.dumps((fn, *args))`; its output is `cloudpickle.dumps(fn(*args))`.
This has not been run against a real Symphony cluster: the tests run it against a double of the SDK
(tests/symphony_double/).
"""

import array

import cloudpickle
import soamapi


class Message(soamapi.Message):
    def __init__(self, payload: bytes = b""):
        self.__payload = payload

    def set_payload(self, payload: bytes):
        self.__payload = payload

    def get_payload(self) -> bytes:
        return self.__payload

    def on_serialize(self, stream):
        payload_array = array.array("b", self.get_payload())
        stream.write_byte_array(payload_array, 0, len(payload_array))

    def on_deserialize(self, stream):
        self.set_payload(stream.read_byte_array("b"))


class ServiceContainer(soamapi.ServiceContainer):
    def on_create_service(self, service_context):
        return

    def on_session_enter(self, session_context):
        return

    def on_invoke(self, task_context):
        input_message = Message()
        task_context.populate_task_input(input_message)

        fn, *args = cloudpickle.loads(input_message.get_payload())
        output_payload = cloudpickle.dumps(fn(*args))

        output_message = Message(output_payload)
        task_context.set_task_output(output_message)

    def on_session_leave(self):
        return

    def on_destroy_service(self):
        return


if __name__ == "__main__":
    ServiceContainer().run()
