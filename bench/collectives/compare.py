"""Puts phalanx's figures and the peers' from one run side by side.

    compare.py --rate 1gbit FILE...

Each FILE holds CSV lines as the benchmarks print them (peer,op,world,bytes,
median_s,min_s,max_s, anything after '#' ignored; other lines skipped). Prints
a markdown table per (op, world, size): every peer's median in ms, phalanx's
as a multiple of S/B (the time one link needs for the object), and phalanx
against the best peer (below 1: phalanx is faster). An op of phalanx's
that the peers time under another name (reduce_ready: their reduce;
allreduce_ready and group_allreduce: their allreduce; the peers' buffers are
in memory when the clock starts) is set against that one."""
import argparse
import sys
from collections import defaultdict

from clusters import rate_bytes_per_s

# phalanx's op -> the peers' op it compares with
PEER_OP = {"reduce_ready": "reduce", "allreduce_ready": "allreduce", "group_allreduce": "allreduce"}


def read(paths):
    rows = defaultdict(dict)  # (op, world, bytes) -> peer -> median seconds
    for path in paths:
        with open(path) as f:
            for line in f:
                fields = line.split("#", 1)[0].strip().split(",")
                if len(fields) < 7 or fields[0] == "peer":
                    continue
                try:
                    key = (fields[1], int(fields[2]), int(fields[3]))
                    rows[key][fields[0]] = float(fields[4])
                except ValueError:
                    continue
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    rows = read(a.files)
    # phalanx+tls (run_netns.sh TLS=both): its own column and its cost against plain phalanx, not a peer.
    tls = any("phalanx+tls" in r for r in rows.values())
    peers = sorted({p for r in rows.values() for p in r if p not in ("phalanx", "phalanx+tls")})
    bw = rate_bytes_per_s(a.rate)
    head = ["op", "nodes", "size", "phalanx ms", "x S/B", *(["phalanx+tls ms", "tls / plain"] if tls else []),
            *(f"{p} ms" for p in peers), "phalanx / best peer"]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for (op, world, size), r in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        if "phalanx" not in r:
            continue
        mine = r["phalanx"]
        with_tls = r.get("phalanx+tls")
        tls_cells = ([f"{with_tls * 1e3:,.1f}", f"{with_tls / mine:.2f}"] if with_tls else ["-", "-"]) if tls else []
        if op in PEER_OP:  # the peers' figures for the op this one compares with (a peer's own first)
            r = {**rows.get((PEER_OP[op], world, size), {}), **r}
        theirs = [r[p] for p in peers if p in r]
        best = f"{mine / min(theirs):.2f}" if theirs else "-"
        cells = [f"{r[p] * 1e3:,.1f}" if p in r else "-" for p in peers]
        row = [op, world, size, f"{mine * 1e3:,.1f}", f"{mine / (size / bw):.2f}", *tls_cells, *cells, best]
        print("| " + " | ".join(str(c) for c in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
