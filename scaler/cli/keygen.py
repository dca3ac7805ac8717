"""`scaler_keygen DIRECTORY NAME...`: make CURVE key pairs for a scheduler, its clients and workers."""

from __future__ import annotations

import argparse
import os
from typing import Sequence

import zmq.auth


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        "scaler_keygen",
        description="Write NAME.key (public) and NAME.key_secret (the pair) for each NAME into DIRECTORY. "
        "Give the scheduler its .key_secret and a directory holding the .key files of every client and "
        "worker it should accept; give each client and worker the scheduler's .key and its own .key_secret.",
    )
    parser.add_argument("directory", type=_directory, help="where to write the key files (created if missing)")
    parser.add_argument("names", nargs="+", type=_key_name, help="one key pair per name, e.g. scheduler client worker")
    args = parser.parse_args(argv)
    try:
        os.makedirs(args.directory, exist_ok=True)
        for name in args.names:
            public, secret = zmq.auth.create_certificates(args.directory, name)
            os.chmod(secret, 0o600)
            print(f"{name}: public {public}, secret {secret}")
    except OSError as error:
        parser.error(f"cannot write keys into {args.directory!r}: {error.strerror or error}")


def _directory(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("the directory is empty")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    return text


def _key_name(text: str) -> str:
    # The name becomes NAME.key and NAME.key_secret inside the directory, nowhere else.
    if not text or text in (".", "..") or "/" in text or os.sep in text or text != text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not a key name: use a plain name such as scheduler or worker1")
    return text


if __name__ == "__main__":
    main()
