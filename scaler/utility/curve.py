"""ZeroMQ CURVE: encryption, and authentication of clients and workers by their public keys.

Keys are the certificate files `zmq.auth.create_certificates` writes (`scaler_keygen` makes them):
NAME.key holds a public key, NAME.key_secret holds the pair.

- The scheduler needs its own secret key file and a directory of the public keys it accepts.
- A client or a worker needs the scheduler's public key file and its own secret key file.

Each can come from an option/argument or from the environment variables below.
"""

from __future__ import annotations

import dataclasses
import os

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

SCHEDULER_SECRET_KEY_ENV = "SCALER_CURVE_SCHEDULER_SECRET_KEY"
AUTHORIZED_KEYS_ENV = "SCALER_CURVE_AUTHORIZED_KEYS"
SERVER_KEY_ENV = "SCALER_CURVE_SERVER_KEY"
SECRET_KEY_ENV = "SCALER_CURVE_SECRET_KEY"


@dataclasses.dataclass(frozen=True)
class ServerKeys:
    secret_key_file: str
    authorized_keys_dir: str

    @staticmethod
    def resolve(secret_key_file: str | None, authorized_keys_dir: str | None) -> ServerKeys | None:
        secret = secret_key_file or os.environ.get(SCHEDULER_SECRET_KEY_ENV)
        authorized = authorized_keys_dir or os.environ.get(AUTHORIZED_KEYS_ENV)
        if not secret and not authorized:
            return None
        if not secret or not authorized:
            raise ValueError(
                "CURVE needs both the scheduler's secret key file and a directory of authorized public keys "
                f"(--curve-secret-key / {SCHEDULER_SECRET_KEY_ENV} and --curve-authorized-keys / {AUTHORIZED_KEYS_ENV})"
            )
        _require_file(secret, "scheduler secret key")
        if not os.path.isdir(authorized):
            raise ValueError(f"authorized keys directory {authorized!r} does not exist")
        return ServerKeys(secret, authorized)


@dataclasses.dataclass(frozen=True)
class PeerKeys:
    server_key_file: str
    secret_key_file: str

    @staticmethod
    def resolve(server_key_file: str | None, secret_key_file: str | None) -> PeerKeys | None:
        server = server_key_file or os.environ.get(SERVER_KEY_ENV)
        secret = secret_key_file or os.environ.get(SECRET_KEY_ENV)
        if not server and not secret:
            return None
        if not server or not secret:
            raise ValueError(
                "CURVE needs both the scheduler's public key file and this peer's secret key file "
                f"({SERVER_KEY_ENV} and {SECRET_KEY_ENV}, or the matching options)"
            )
        _require_file(server, "scheduler public key")
        _require_file(secret, "secret key")
        return PeerKeys(server, secret)


def secure_server(context: zmq.Context, socket: zmq.Socket, keys: ServerKeys) -> ThreadAuthenticator:
    """Make `socket` a CURVE server that only accepts the authorized keys; the caller stops the authenticator."""
    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=keys.authorized_keys_dir)
    public, secret = zmq.auth.load_certificate(keys.secret_key_file)
    if secret is None:
        authenticator.stop()
        raise ValueError(f"{keys.secret_key_file} holds no secret key (use the .key_secret file)")
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True
    return authenticator


def secure_peer(socket: zmq.Socket, keys: PeerKeys) -> None:
    server_public, _ = zmq.auth.load_certificate(keys.server_key_file)
    public, secret = zmq.auth.load_certificate(keys.secret_key_file)
    if secret is None:
        raise ValueError(f"{keys.secret_key_file} holds no secret key (use the .key_secret file)")
    socket.curve_serverkey = server_public
    socket.curve_publickey = public
    socket.curve_secretkey = secret


def _require_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise ValueError(f"{what} file {path!r} does not exist")
