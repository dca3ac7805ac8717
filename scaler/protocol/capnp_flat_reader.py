"""The message reader class behind pycapnp's `from_bytes`, found once, for the codec's decode of every frame.

`from_bytes` is a generator-based context manager, which costs three times the read itself (2.5 us against
0.7), and its exit only releases the buffer of a non-bytes input: the codec hands it bytes only, which the
reader keeps alive as long as anything read from it. pycapnp does not export the class, so it is found by a
private attribute of what `from_bytes` yields; a pycapnp that renames or changes it gets None here, and the
codec then decodes through `from_bytes` itself: slower, still right.
"""

from __future__ import annotations

from typing import Any, Callable

FlatReader = Callable[[bytes, int, int], Any]


def flat_reader_class(struct_module: Any) -> FlatReader | None:
    """`cls(frame, traversal_limit_in_words, nesting_limit).get_root(schema)` reads `frame` as `from_bytes` of
    `struct_module` does; None unless it is checked here to open a frame and read it alike."""
    probe = struct_module.new_message().to_bytes()
    try:
        with struct_module.from_bytes(probe) as reader:
            candidate = type(reader._parent)
            expected = reader.to_dict()
        if candidate(probe, 1 << 10, 16).get_root(struct_module.schema).to_dict() != expected:
            return None
    except Exception:  # any change to the private parts: no attribute, another signature, another root
        return None
    return candidate
