"""Keystroke echo timed by a client that is not the bench's, in a process of its own, on one of
three paths (BENCHMARKS.md, (11)): ptyhub's terminal WebSocket, ttyd's WebSocket, or a bare PTY
this process opens itself (the floor as this client sees it).

The terminal runs the bench's echo program: it prints `R`, then writes back each byte it reads
(`stty raw -echo; printf R; exec cat`). The client waits for `R`, sends one key at a time, the next
only once the previous one's echo arrived, times each round trip from the send to the echo, and
prints one JSON line: {"samples_us": [...]} for the keys after the warm-up. Any other outcome
exits 1 with the reason on stderr.

ttyd's protocol (1.7): the `tty` subprotocol; the client's first message is a JSON object with
the terminal's size, which starts the command; input is `0` + bytes; output is `0` + bytes, and
messages starting with another digit (title, preferences) are not the terminal's output.
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from websockets.asyncio.client import connect

ALPHABET = b"abcdefghijklmnopqrstuvwxyz"
WARM_UP = 20
PATIENCE = 60


class Ptyhub:
    """ptyhub's terminal WebSocket: binary frames are the terminal's bytes both ways."""

    subprotocols = None

    @staticmethod
    def hello():
        return None

    @staticmethod
    def input(key: bytes) -> bytes:
        return key

    @staticmethod
    def output(frame) -> bytes:
        # Text frames are ptyhub's JSON frames (`connected`, control changes): not output.
        return frame if isinstance(frame, bytes) else b""


class Ttyd:
    """ttyd's WebSocket: one command byte before every message."""

    subprotocols = ["tty"]

    @staticmethod
    def hello():
        return json.dumps({"AuthToken": "", "columns": 80, "rows": 24}).encode()

    @staticmethod
    def input(key: bytes) -> bytes:
        return b"0" + key

    @staticmethod
    def output(frame) -> bytes:
        if isinstance(frame, bytes) and frame[:1] == b"0":
            return frame[1:]
        return b""


async def next_output(socket, protocol) -> bytes:
    while True:
        data = protocol.output(await asyncio.wait_for(socket.recv(), PATIENCE))
        if data:
            return data


async def echo_websocket(url: str, protocol, keys: int) -> list[float]:
    options = {"max_size": None, "compression": None, "subprotocols": protocol.subprotocols}
    async with connect(url, **options) as socket:
        hello = protocol.hello()
        if hello is not None:
            await socket.send(hello)
        ready = b""
        while ready != b"R":
            ready += await next_output(socket, protocol)
            if not b"R".startswith(ready):
                raise ValueError(f"unexpected output before the echo: {ready!r}")
        samples = []
        for index in range(keys + WARM_UP):
            key = ALPHABET[index % len(ALPHABET) : index % len(ALPHABET) + 1]
            sent = time.perf_counter()
            await socket.send(protocol.input(key))
            echoed = await next_output(socket, protocol)
            elapsed = time.perf_counter() - sent
            if echoed != key:
                raise ValueError(f"keystroke {key!r} came back as {echoed!r}")
            if index >= WARM_UP:
                samples.append(elapsed * 1e6)
        return samples


def echo_bare_pty(script: str, keys: int) -> list[float]:
    """The same program on a PTY this process holds: blocking reads of the master, no loop."""
    master, slave = os.openpty()
    child = subprocess.Popen(
        ["/bin/sh", "-c", script],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        ready = b""
        while ready != b"R":
            ready += os.read(master, 4096)
            if not b"R".startswith(ready):
                raise ValueError(f"unexpected output before the echo: {ready!r}")
        samples = []
        for index in range(keys + WARM_UP):
            key = ALPHABET[index % len(ALPHABET) : index % len(ALPHABET) + 1]
            sent = time.perf_counter()
            os.write(master, key)
            echoed = os.read(master, 4096)
            elapsed = time.perf_counter() - sent
            if echoed != key:
                raise ValueError(f"keystroke {key!r} came back as {echoed!r}")
            if index >= WARM_UP:
                samples.append(elapsed * 1e6)
        return samples
    finally:
        child.kill()
        child.wait()
        os.close(master)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=["ptyhub", "ttyd", "pty"])
    parser.add_argument("target", help="the WebSocket URL, or for `pty` the echo program")
    parser.add_argument("keys", type=int)
    arguments = parser.parse_args()
    try:
        if arguments.path == "pty":
            samples = echo_bare_pty(arguments.target, arguments.keys)
        else:
            protocol = Ptyhub if arguments.path == "ptyhub" else Ttyd
            samples = asyncio.run(echo_websocket(arguments.target, protocol, arguments.keys))
    except Exception as error:  # noqa: BLE001 - every failure is reported the same way
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"samples_us": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
