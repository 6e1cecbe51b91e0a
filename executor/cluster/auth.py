"""Ray's token authentication for every cluster a live run starts or joins.

Ray's gRPC servers listen on every interface (Ray 2.60 has no setting for them), so a run only
starts or joins clusters that require Ray's token, and keeps that token where no other user can
read it: RAY_AUTH_TOKEN, or the file RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token names. A local run
without a token writes a fresh one, readable by its owner only (Ray would write it readable by
everyone). Every problem is one `ConfigError` line, before Ray starts.

The driver's settings say only what the driver sends: a cluster whose nodes run with
authentication off accepts the driver's token and anyone else's call alike. So a run that joins
`--address` first asks the cluster's GCS for its cluster id with no token
(`check_cluster_requires_token`) and joins only if the GCS refuses that call as unauthenticated.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from dynaresize.config_io import ConfigError

PROBE_TIMEOUT_S = 5.0
"""How long the GCS has to answer the call without a token."""

AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"


def check_token_auth(address: str | None) -> None:
    """Every cluster the run starts or joins uses Ray's token authentication (Ray's servers
    listen on every interface), with a token no other user can read: RAY_AUTH_TOKEN, or the file
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token names. A local run without any token writes a fresh
    one there, readable by its owner only (Ray would write it readable by everyone)."""
    where = f"--address {address}" if address is not None else "local Ray cluster"
    mode = os.environ.get(AUTH_MODE_ENV)
    if address is not None and (mode or "").lower() != "token":
        raise ConfigError(
            f"{where}: set {AUTH_MODE_ENV}=token (and the cluster's token in {AUTH_TOKEN_ENV} "
            f"or a file {AUTH_TOKEN_PATH_ENV} names): a live run joins only clusters that "
            "require Ray's token authentication"
        )
    if mode is not None and mode.lower() != "token":
        raise ConfigError(
            f"{AUTH_MODE_ENV}={mode}: a live run needs Ray's token authentication (Ray's "
            f"servers listen on every interface); unset {AUTH_MODE_ENV} or set it to token"
        )
    if os.environ.get(AUTH_TOKEN_ENV):
        return
    token_file = token_path()
    if address is None and not token_file.exists():
        write_token(token_file)
    check_token_file(token_file, where=where)


def token_path() -> Path:
    """The token file Ray reads: RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token."""
    return Path(os.environ.get(AUTH_TOKEN_PATH_ENV) or Path.home() / ".ray" / "auth_token")


def write_token(token_file: Path) -> None:
    """A new random token, created readable by its owner only (never over an existing file)."""
    token_file.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))


def check_token_file(token_file: Path, *, where: str) -> None:
    """The token file exists and only its owner may read it."""
    try:
        mode_bits = token_file.stat().st_mode
    except OSError:
        raise ConfigError(
            f"{where}: no Ray token: {token_file} is missing and {AUTH_TOKEN_ENV} is not set"
        ) from None
    if mode_bits & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"{where}: Ray's token file {token_file} can be read by other users "
            f"(mode {stat.S_IMODE(mode_bits):o}); run chmod 600 {token_file}"
        )


def anonymous_call_problem(gcs_address: str) -> str | None:
    """Why the GCS at `gcs_address` (HOST:PORT) cannot be trusted to require Ray's token, or None
    when it refused a call that carried no token as unauthenticated. The call is Ray's cheapest
    (the cluster id), made on a bare gRPC channel that adds no token of its own."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(gcs_address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            stub.GetClusterId(request, timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as err:
            code = err.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return None
            return (
                f"could not confirm that it requires Ray's token: its GCS at {gcs_address} "
                f"answered a call without one with {code.name}"
            )
    return (
        f"the cluster does not require Ray's token: its GCS at {gcs_address} answered a call "
        "that carried none; start its nodes with RAY_AUTH_MODE=token"
    )


def check_cluster_requires_token(address: str, gcs_address: str) -> None:
    """Refuse, with one line, a cluster that answers callers without Ray's token."""
    problem = anonymous_call_problem(gcs_address)
    if problem is not None:
        raise ConfigError(f"--address {address}: {problem}")
