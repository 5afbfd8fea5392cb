"""A byte relay: the least any process between the client and the upstream can do.

    python benchmarks/relay.py UPSTREAM_PORT PORT

It parses nothing but the request head (to find the body's length), sends the request on to the
upstream on a new connection marked ``connection: close``, and copies each read of the answer back
to the client as it arrives (the answer's ``connection: close`` too, so the client opens a new
connection per request: a few hundred per round, the same on every run). ``benchmarks/load.py
--relay`` sends its load through it too: its total beside the direct one is the cost of the extra
process hop alone, on the same cores, with no parsing, no translation and no store.
"""

from __future__ import annotations

import asyncio
import sys

import uvloop


async def _relay(upstream_port: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    try:
        while True:  # the client's keep-alive requests, one after another
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head[:-4].split(b"\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in lines
                           if line.lower().startswith(b"content-length:")), 0)
            body = await reader.readexactly(length)
            kept = [line for line in lines if not line.lower().startswith(b"connection:")]
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
            try:
                up_writer.write(b"\r\n".join([*kept, b"connection: close", b"", b""]) + body)
                while data := await up_reader.read(262144):
                    writer.write(data)
                    await writer.drain()
            finally:
                up_writer.close()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(upstream_port: int, port: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: _relay(upstream_port, r, w), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1]), int(sys.argv[2])))
