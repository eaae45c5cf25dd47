"""What one link of the emulated cluster carries: one TCP stream of SIZE
bytes from namespace pnode0 to pnode1 (the server side runs in pnode1),
timed from the first byte sent to the receiver's one-byte answer, as a
multiple of S/B at RATE. TCP/IP and Ethernet headers make it more than 1;
a ring allreduce moves 2 (N-1)/N of the array over each link, so its floor
on these links is that times this figure.

    bash ../shared/bench/peers/netns.sh up 2 1gbit 100us
    ip netns exec pnode1 .venv/bin/python bench/collectives/link_rate.py serve &
    ip netns exec pnode0 .venv/bin/python bench/collectives/link_rate.py send 10.77.0.2
    bash ../shared/bench/peers/netns.sh down
"""
import argparse
import socket
import time

PORT = 5999


def serve(size, reps):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", PORT))
    s.listen(1)
    s.settimeout(60)
    buf = bytearray(1 << 20)
    for _ in range(reps):
        c, _ = s.accept()
        c.settimeout(60)
        got = 0
        while got < size:
            r = c.recv_into(buf)
            if r == 0:
                raise SystemExit("the sender closed early")
            got += r
        c.sendall(b"k")
        c.close()


def send(host, size, reps, rate_bytes_per_s):
    data = b"x" * size
    for _ in range(reps):
        for _ in range(100):  # (the server may not listen yet)
            try:
                c = socket.create_connection((host, PORT), timeout=60)
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = time.perf_counter()
        c.sendall(data)
        c.recv(1)
        took = time.perf_counter() - t
        c.close()
        print(f"{size} bytes in {took * 1e3:.1f} ms = {took / (size / rate_bytes_per_s):.4f} x S/B", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["serve", "send"])
    ap.add_argument("host", nargs="?", default="10.77.0.2")
    ap.add_argument("--size", type=int, default=32 << 20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate-gbit", type=float, default=1.0)
    a = ap.parse_args()
    if a.mode == "serve":
        serve(a.size, a.reps)
    else:
        send(a.host, a.size, a.reps, a.rate_gbit * 1e9 / 8)


if __name__ == "__main__":
    main()
