"""The custom serializer of document 003, used by a client.

One character differs from the document: `payload[0:1]` instead of `payload[0]`. Indexing bytes gives
an int in Python 3, which `ObjType` (whose values are bytes) cannot look up, so the document's version
fails on its first deserialization.

It needs pandas, and pyarrow for pandas' parquet: `pip install 'scaler[examples]'`.
"""

import enum
import pickle
import struct
from io import BytesIO
from typing import Any

try:
    import pandas as pd
    import pyarrow  # noqa: F401 - what pandas writes and reads parquet with, imported here to say so at once
except ImportError as error:
    raise SystemExit(f"this example needs pandas and pyarrow ({error}): pip install 'scaler[examples]'") from None
from cloudpickle import cloudpickle

from scaler import Client, SchedulerClusterCombo, Serializer


class ObjType(enum.Enum):
    General = b"G"
    Integer = b"I"
    DataFrame = b"D"


class CustomSerializer(Serializer):
    @staticmethod
    def serialize(obj: Any) -> bytes:
        if isinstance(obj, pd.DataFrame):
            buf = BytesIO()
            obj.to_parquet(buf)
            return ObjType.DataFrame.value + buf.getvalue()

        if isinstance(obj, int):
            return ObjType.Integer.value + struct.pack("I", obj)

        return ObjType.General.value + cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def deserialize(payload: bytes) -> Any:
        obj_type = ObjType(payload[0:1])
        payload = payload[1:]

        if obj_type == ObjType.DataFrame:
            buf = BytesIO(payload)
            return pd.read_parquet(buf)

        if obj_type == ObjType.Integer:
            return struct.unpack("I", payload)[0]

        return cloudpickle.loads(payload)


def add(a, b):
    return a + b


def column_total(frame: pd.DataFrame) -> int:
    return int(frame["x"].sum())


def main():
    cluster = SchedulerClusterCombo(n_workers=1)
    with Client(address=cluster.get_address(), serializer=CustomSerializer()) as client:
        print(client.submit(add, 1, 2).result())  # 3, integers travel as 4-byte integers
        print(client.submit(column_total, pd.DataFrame({"x": [1, 2, 3]})).result())  # 6, the frame as parquet
    cluster.shutdown()


if __name__ == "__main__":
    main()
