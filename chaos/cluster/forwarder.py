"""A TCP forwarder: ``python chaos/cluster/forwarder.py LISTEN_HOST:PORT TARGET_HOST:PORT``.

MariaDB listens on 127.0.0.1 only, which the hosts' namespaces cannot reach; this forwards the
database host's bridge address to it. Each connection is its own pair of streams, so a host
whose path is frozen leaves its connections open here, as a frozen network leaves them open at
a real database (the server keeps the session and whatever it holds).
"""

import asyncio
import sys

__all__ = ["main"]

CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(accepted, *listen, backlog=512)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> None:
    listen, target = (_address(value) for value in argv)
    asyncio.run(_serve(listen, target))


if __name__ == "__main__":
    main(sys.argv[1:])
