"""ZeroMQ CURVE: encryption, and authentication of clients and workers by their public keys.

Keys are the certificate files `zmq.auth.create_certificates` writes (`scaler_keygen` makes them):
NAME.key holds a public key, NAME.key_secret holds the pair.

- The scheduler needs its own secret key file and a directory of the public keys it accepts. A standby
  scheduler and the one it stands by for share one key pair (each accepts it, and the standby probes with it).
- A client or a worker needs the scheduler's public key file and its own secret key file.

Each can come from an option/argument or from the environment variables below.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Callable, TypeVar, Union

if TYPE_CHECKING:
    # zmq only names types here: the command lines read these options before (or, for --help, without) opening a
    # socket, and a cluster's process opens none.
    import zmq
    from zmq.auth.thread import ThreadAuthenticator

SCHEDULER_SECRET_KEY_ENV = "SCALER_CURVE_SCHEDULER_SECRET_KEY"
AUTHORIZED_KEYS_ENV = "SCALER_CURVE_AUTHORIZED_KEYS"
SERVER_KEY_ENV = "SCALER_CURVE_SERVER_KEY"
SECRET_KEY_ENV = "SCALER_CURVE_SECRET_KEY"


@dataclasses.dataclass(frozen=True)
class ServerKeys:
    """The scheduler's: its own secret key file, and the directory of public keys it accepts."""

    secret_key_file: str
    authorized_keys_dir: str

    @staticmethod
    def resolve(secret_key_file: str | None, authorized_keys_dir: str | None) -> ServerKeys | None:
        return _resolve_pair(
            ServerKeys,
            (secret_key_file, SCHEDULER_SECRET_KEY_ENV, _file_check("scheduler secret key")),
            (authorized_keys_dir, AUTHORIZED_KEYS_ENV, _directory_check("authorized keys")),
            "CURVE needs both the scheduler's secret key file and a directory of authorized public keys "
            f"(--curve-secret-key / {SCHEDULER_SECRET_KEY_ENV} and --curve-authorized-keys / {AUTHORIZED_KEYS_ENV})",
        )


@dataclasses.dataclass(frozen=True)
class PeerKeys:
    """A client's or a worker's: the scheduler's public key file, and its own secret key file."""

    server_key_file: str
    secret_key_file: str

    @staticmethod
    def resolve(server_key_file: str | None, secret_key_file: str | None) -> PeerKeys | None:
        return _resolve_pair(
            PeerKeys,
            (server_key_file, SERVER_KEY_ENV, _file_check("scheduler public key")),
            (secret_key_file, SECRET_KEY_ENV, _file_check("secret key")),
            "CURVE needs both the scheduler's public key file and this peer's secret key file "
            f"({SERVER_KEY_ENV} and {SECRET_KEY_ENV}, or the matching options)",
        )


# A value as given, the environment variable to read when it is not, and the check of what it names.
_Source = tuple[Union[str, None], str, Callable[[str], None]]
_Keys = TypeVar("_Keys")


def _resolve_pair(keys: Callable[[str, str], _Keys], first: _Source, second: _Source, both_needed: str) -> _Keys | None:
    """`keys` of both paths, each as given or else from its environment variable, checked; None if neither is set."""
    first_path = first[0] or os.environ.get(first[1])
    second_path = second[0] or os.environ.get(second[1])
    if not first_path and not second_path:
        return None
    if not first_path or not second_path:
        raise ValueError(both_needed)
    first[2](first_path)
    second[2](second_path)
    return keys(first_path, second_path)


def _file_check(what: str) -> Callable[[str], None]:
    def check(path: str) -> None:
        if not os.path.isfile(path):
            raise ValueError(f"{what} file {path!r} does not exist")

    return check


def _directory_check(what: str) -> Callable[[str], None]:
    def check(path: str) -> None:
        if not os.path.isdir(path):
            raise ValueError(f"{what} directory {path!r} does not exist")

    return check


def secure_server(context: zmq.Context, socket: zmq.Socket, keys: ServerKeys) -> ThreadAuthenticator:
    """Make `socket` a CURVE server that only accepts the authorized keys; the caller stops the authenticator."""
    # zmq.auth is imported where keys are used: its thread brings asyncio, which a process started without keys
    # (a cluster's, whose start every user waits for) would import for nothing.
    from zmq.auth.thread import ThreadAuthenticator

    authenticator = ThreadAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve(domain="*", location=keys.authorized_keys_dir)
    try:
        public, secret = _own_key_pair(keys.secret_key_file)
    except ValueError:
        authenticator.stop()
        raise
    # Its own key is accepted too: the schedulers of a cluster share one key pair (their peers know one server
    # key), and a standby probes the scheduler ranked before it with that pair (secure_probe).
    authenticator.certs.setdefault("*", {})[public] = True
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True
    return authenticator


def secure_probe(socket: zmq.Socket, keys: ServerKeys) -> None:
    """Make `socket` a CURVE client of another scheduler of the cluster (a standby's probe): it holds the same key
    pair, which every scheduler accepts (secure_server)."""
    public, secret = _own_key_pair(keys.secret_key_file)
    socket.curve_serverkey = public
    socket.curve_publickey = public
    socket.curve_secretkey = secret


def secure_peer(socket: zmq.Socket, keys: PeerKeys) -> None:
    import zmq.auth

    server_public, _ = zmq.auth.load_certificate(keys.server_key_file)
    public, secret = _own_key_pair(keys.secret_key_file)
    socket.curve_serverkey = server_public
    socket.curve_publickey = public
    socket.curve_secretkey = secret


def _own_key_pair(secret_key_file: str) -> tuple[bytes, bytes]:
    """The public and secret keys of a `.key_secret` file; ValueError for a file without the secret one."""
    import zmq.auth

    public, secret = zmq.auth.load_certificate(secret_key_file)
    if secret is None:
        raise ValueError(f"{secret_key_file} holds no secret key (use the .key_secret file)")
    return public, secret
