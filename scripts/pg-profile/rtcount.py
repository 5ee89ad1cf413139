#!/usr/bin/env python3
"""Counting proxy for the PostgreSQL wire protocol: listens on LISTEN, forwards to UPSTREAM,
and counts the client's messages by type. A round trip is a Sync ('S') or a simple Query
('Q'): each makes the client wait for ReadyForQuery. SIGUSR1 (or `kill -USR1`) prints and
resets the counts to the file given as the 3rd argument."""
import asyncio, collections, signal, sys, json
LISTEN, UPSTREAM, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
counts = collections.Counter()

async def client_to_server(r, w):
    # startup message: int32 length, no type byte (may be SSLRequest first)
    while True:
        hdr = await r.readexactly(4)
        n = int.from_bytes(hdr, 'big')
        body = await r.readexactly(n - 4)
        w.write(hdr + body); await w.drain()
        code = int.from_bytes(body[:4], 'big')
        if code == 80877103:  # SSLRequest: server answers 'N', then a real startup follows
            continue
        break
    while True:
        t = await r.readexactly(1)
        hdr = await r.readexactly(4)
        n = int.from_bytes(hdr, 'big')
        body = await r.readexactly(n - 4)
        counts[t.decode()] += 1
        w.write(t + hdr + body)
        await w.drain()

async def pipe(r, w):
    while True:
        b = await r.read(65536)
        if not b: break
        w.write(b); await w.drain()

async def handle(cr, cw):
    sr, sw = await asyncio.open_connection('127.0.0.1', UPSTREAM)
    counts['connections'] += 1
    try:
        await asyncio.gather(client_to_server(cr, sw), pipe(sr, cw))
    except Exception:
        pass
    finally:
        sw.close(); cw.close()

def dump():
    with open(OUT, 'a') as f:
        f.write(json.dumps(dict(counts)) + "\n")
    counts.clear()

async def main():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, dump)
    srv = await asyncio.start_server(handle, '127.0.0.1', LISTEN)
    async with srv: await srv.serve_forever()
asyncio.run(main())
