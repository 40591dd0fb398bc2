"""Runs a command in a ptyhub instance through the gateway alone, streams its output, and exits
with its exit code: what `ptyhub exec` does, with `grpcio` and stubs generated from proto/.

Generate the stubs once (into a directory on PYTHONPATH):

    python -m grpc_tools.protoc -I proto --python_out=stubs --grpc_python_out=stubs \
        proto/ptyhub/broker/v1/broker.proto proto/ptyhub/session/v1/session.proto

Usage: PYTHONPATH=stubs python ptyhub_exec.py HOST:PORT TOKEN INSTANCE COMMAND [ARG...]

The session is created with CreateSession, and its terminal streamed with the broker's Attach,
which the gateway relays (metadata `authorization` and `ptyhub-instance`; the hello needs no
ticket). When the connection drops (the gateway restarts), the stream is opened again with
`since` set to the offset after the last byte written, so every byte is written once.
"""

import queue
import sys
import time

import grpc

from ptyhub.broker.v1 import broker_pb2, broker_pb2_grpc
from ptyhub.session.v1 import session_pb2, session_pb2_grpc

# Errors that a new connection may cure.
TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.INTERNAL,
}
RECONNECT_WINDOW_SECONDS = 60
# The terminal would turn "\n" into "\r\n": turn that off, then run the command.
WRAPPER = ["/bin/sh", "-c", 'stty -onlcr 2>/dev/null; exec "$@"', "ptyhub-exec"]


def frames(hello, done):
    """The client side of one Attach: the hello, then nothing until the stream is done."""
    yield broker_pb2.ClientFrame(hello=hello)
    done.get()


class Progress:
    """The offset after the last byte written, kept across streams (and their errors)."""

    def __init__(self):
        self.offset = 0


def stream_once(broker, metadata, session_id, progress, out):
    """One Attach stream from `progress.offset`; returns the exit status, or None when the
    gateway ended the stream without one."""
    hello = broker_pb2.Hello(
        session_id=session_id, role=broker_pb2.ROLE_CONTROLLER, since=progress.offset
    )
    done = queue.Queue()
    try:
        for frame in broker.Attach(frames(hello, done), metadata=metadata):
            kind = frame.WhichOneof("frame")
            if kind == "output":
                if frame.output.offset != progress.offset:
                    raise SystemExit(f"output at {frame.output.offset}, expected {progress.offset}")
                out.write(frame.output.data)
                out.flush()
                progress.offset = frame.output.offset + len(frame.output.data)
            elif kind == "gap":
                raise SystemExit(f"{frame.gap.lost} bytes of output were lost")
            elif kind == "exit":
                return frame.exit
            elif kind == "closed":
                raise SystemExit("the session was closed before the command finished")
            elif kind == "detached":
                raise SystemExit("another client took the session over")
        return None
    finally:
        done.put(None)


def main(target, token, instance, command):
    channel = grpc.insecure_channel(target)
    metadata = [("authorization", f"Bearer {token}")]
    sessions = session_pb2_grpc.SessionApiStub(channel)
    created = sessions.CreateSession(
        session_pb2.CreateSessionRequest(instance=instance, command=WRAPPER + command),
        metadata=metadata,
        timeout=30,
    )
    session_id = created.session.id
    # The gateway hands out itself as where to attach, never a broker's internal address.
    print(f"[session {session_id}, attach at {created.attach.broker_endpoint}]", file=sys.stderr)

    broker = broker_pb2_grpc.PtyBrokerStub(channel)
    attach_metadata = metadata + [("ptyhub-instance", instance)]
    progress = Progress()
    dropped_at = None
    backoff = 0.2
    while True:
        started_at = progress.offset
        try:
            exit_status = stream_once(broker, attach_metadata, session_id, progress, sys.stdout.buffer)
            if exit_status is not None:
                break
            reason = "the gateway ended the stream"
        except grpc.RpcError as error:
            if error.code() not in TRANSIENT:
                raise SystemExit(f"attach refused: {error.code().name}: {error.details()}")
            reason = f"{error.code().name}: {error.details()}"
        if progress.offset != started_at:
            # The stream worked before it dropped: the window and the backoff start again.
            dropped_at, backoff = None, 0.2
        dropped_at = dropped_at or time.monotonic()
        if time.monotonic() - dropped_at > RECONNECT_WINDOW_SECONDS:
            raise SystemExit(f"connection lost and not restored: {reason}")
        print(f"[reconnecting from offset {progress.offset}: {reason}]", file=sys.stderr)
        time.sleep(backoff)
        backoff = min(backoff * 2, 5)

    sessions.CloseSession(
        session_pb2.CloseSessionRequest(instance=instance, session_id=session_id),
        metadata=metadata,
        timeout=30,
    )
    print(f"[exit code {exit_status.code}]", file=sys.stderr)
    return exit_status.code


if __name__ == "__main__":
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
