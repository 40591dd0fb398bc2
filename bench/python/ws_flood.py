"""The throughput scenario's flood, read through the gateway's terminal WebSocket by a client
that is not the bench's: Python's `websockets`, in a process of its own (BENCHMARKS.md, (1)).

The session runs the bench's flood script: it prints `R`, waits for a newline, writes `bytes`
of the pattern, and waits for another newline. This client waits for `connected` and `R`, starts
its clock as it sends the newline, reads until it holds exactly `bytes` bytes, each checked
against the pattern, and prints one JSON line: {"seconds": ...}. Any other outcome exits 1 with
the reason on stderr.

With --read-size N the client reads the WebSocket's TCP stream N bytes at a time (one recv() of
at most N bytes per wakeup) and queues one frame at most, as a slow or small-buffered client
does.
"""

import argparse
import asyncio
import json
import sys
import time

from websockets.asyncio.client import connect

LINE = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.\n"
# Long enough that a check of any frame up to 1 MiB is one comparison.
PATTERN = LINE * ((2 << 20) // len(LINE) + 2)
PATIENCE = 60


def check(chunk: bytes, position: int) -> None:
    start = position % len(LINE)
    if chunk != PATTERN[start : start + len(chunk)]:
        for index, byte in enumerate(chunk):
            expected = LINE[(position + index) % len(LINE)]
            if byte != expected:
                raise ValueError(
                    f"byte {position + index} is {byte:#04x}, expected {expected:#04x}"
                )
        # Equal bytes but unequal slices: a frame longer than the pattern held.
        raise ValueError(f"a frame of {len(chunk)} bytes at {position} outruns the check")


async def next_frame(socket):
    return await asyncio.wait_for(socket.recv(), PATIENCE)


async def flood(url: str, total: int, read_size: int | None) -> float:
    options = {"max_size": None, "compression": None}
    if read_size:
        options["max_queue"] = 1
    async with connect(url, **options) as socket:
        if read_size:
            # CPython's socket transport reads `max_size` bytes per recv().
            socket.transport.max_size = read_size
        while True:
            frame = await next_frame(socket)
            if isinstance(frame, str) and json.loads(frame).get("status") == "connected":
                break
        ready = b""
        while ready != b"R":
            frame = await next_frame(socket)
            if isinstance(frame, bytes):
                ready += frame
                if not b"R".startswith(ready):
                    raise ValueError(f"unexpected output before the flood: {ready!r}")
        started = time.perf_counter()
        await socket.send(b"\n")
        received = 0
        while received < total:
            frame = await next_frame(socket)
            if isinstance(frame, str):
                continue
            if received + len(frame) > total:
                raise ValueError(f"more output than the {total} bytes written")
            check(frame, received)
            received += len(frame)
        elapsed = time.perf_counter() - started
        await socket.send(b"\n")
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="ws://.../ws/tool-instances/{iid}/terminal/{sid}?token=...")
    parser.add_argument("bytes", type=int)
    parser.add_argument("--read-size", type=int)
    arguments = parser.parse_args()
    try:
        seconds = asyncio.run(flood(arguments.url, arguments.bytes, arguments.read_size))
    except Exception as error:  # noqa: BLE001 - every failure is reported the same way
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
