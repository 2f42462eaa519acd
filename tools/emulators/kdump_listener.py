"""Capture fence_kdump messages on UDP 127.0.0.1 (qfence test harness; stdlib only).

Once bound it prints {"listening": "HOST:PORT"}; then each datagram as one JSON line:
  {"t": <unix time>, "from": "127.0.0.1:PORT", "len": 8, "hex": "...",
   "magic": "0x1b302a40", "version": "0x1", "valid": true}
The fence_kdump message is 8 bytes: two 32-bit unsigned integers in the
sender's (host) byte order, magic 0x1B302A40 then version 1 — on x86 and
other little-endian hosts: 40 2a 30 1b 01 00 00 00.

usage: kdump_listener.py [--port 7410] [--count N] [--timeout SECONDS]
"""

import argparse
import json
import socket
import struct
import sys
import time

MAGIC, VERSION = 0x1B302A40, 0x1


def decode(data):
    out = {'len': len(data), 'hex': data.hex()}
    if len(data) >= 8:
        for order, name in (('<', 'little'), ('>', 'big')):
            magic, version = struct.unpack(order + 'II', data[:8])
            if magic == MAGIC:
                out.update(magic=hex(magic), version=hex(version), byteorder=name,
                           valid=(version == VERSION and len(data) == 8))
                return out
    out['valid'] = False
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--host', default='127.0.0.1')
    p.add_argument('--port', type=int, default=7410)
    p.add_argument('--count', type=int, default=0, help='exit after N datagrams (0: never)')
    p.add_argument('--timeout', type=float, default=0, help='exit after this many seconds (0: never)')
    a = p.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if a.host not in ('127.0.0.1', 'localhost', '::1') and not a.host.startswith('127.'):
        raise SystemExit('refusing to listen on a non-loopback address')
    sock.bind((a.host, a.port))
    print(json.dumps({'listening': '%s:%d' % sock.getsockname()[:2]}), flush=True)
    deadline = time.time() + a.timeout if a.timeout else None
    seen = 0
    while a.count == 0 or seen < a.count:
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                break
            sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(65535)
        except socket.timeout:
            break
        seen += 1
        rec = {'t': round(time.time(), 3), 'from': '%s:%d' % peer}
        rec.update(decode(data))
        print(json.dumps(rec), flush=True)
    return 0 if seen else 1


if __name__ == '__main__':
    sys.exit(main())
