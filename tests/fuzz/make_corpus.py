"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
well-formed frames of every kind a peer or a client sends, so the fuzzer
starts from inputs that get past parsing. Run from the repository root:
    python3 tests/fuzz/make_corpus.py
The files are checked in; run again after changing the wire."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import wire  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OID = b"\x11" * 16 + b"\x01\x00\x00\x00"
TID = b"\x11" * 16
CLIENT = b"\x22" * 8
NODE = b"\x33" * 16


def write(target, name, data):
    path = os.path.join(HERE, "corpus", target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


def wire_seeds():
    hello = wire.frame(wire.AUTH_HELLO, wire.field_int(1, 1) + wire.field_bytes(2, b"n" * 32), request_id=0)
    proof = wire.frame(wire.AUTH_PROOF, wire.field_bytes(1, b"p" * 32), request_id=0)
    write("fuzz_wire", "hello", b"\x10" + hello)
    write("fuzz_wire", "hello_proof", b"\x03" + hello + proof)
    write("fuzz_wire", "forward_first", b"\x40" + wire.frame(wire.FORWARD_TASK, wire.forward_task(
        wire.task_spec(TID, "f"))))
    write("fuzz_wire", "gib_header", b"\x01" + wire.frame(wire.FORWARD_TASK, length=1 << 30))
    write("fuzz_wire", "tls_client_hello", b"\x80" + tls_client_hello())
    write("fuzz_wire", "tls_hello_small_reads", b"\x87" + tls_client_hello() + hello)


def tls_client_hello():
    """A TLS 1.3 ClientHello (Python's ssl module over memory BIOs): what a
    TLS node's ports read first."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing)
    try:
        conn.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def rec(to_client, msg_type, body, flags=0):
    return struct.pack("<BBBH", 1 if to_client else 0, msg_type, flags, len(body)) + body


def raylet_seeds():
    spec = wire.task_spec(TID, "f", num_returns=2, extra=wire.field_bytes(4, wire.field_bytes(2, b"arg")))
    actor_spec = wire.task_spec(b"\x44" * 16, "A", extra=wire.field_int(10, 1) + wire.field_bytes(11, b"\x44" * 16))
    register = wire.field_bytes(1, CLIENT) + wire.field_int(3, 1234) + wire.field_bytes(4, b"python")
    ids = wire.field_bytes(1, OID)
    write("fuzz_raylet", "peer_forward", rec(0, wire.FORWARD_TASK, wire.forward_task(spec)))
    write("fuzz_raylet", "peer_forward_actor", rec(0, wire.FORWARD_TASK, wire.forward_task(actor_spec)))
    write("fuzz_raylet", "peer_pull", rec(0, wire.PULL_OBJECT, wire.pull_object(OID)))
    write("fuzz_raylet", "peer_kill", rec(0, wire.KILL_ACTOR, wire.kill_actor(b"\x44" * 16)))
    write("fuzz_raylet", "peer_release", rec(0, wire.RELEASE_HELD, wire.field_bytes(1, CLIENT) + ids
                                             + wire.field_int(3, 1) + wire.field_bytes(4, NODE)))
    step = (wire.field_bytes(1, OID) + wire.field_bytes(2, OID) + wire.field_bytes(3, NODE) + wire.field_bytes(4, OID)
            + wire.field_bytes(5, b"sum") + wire.field_int(9, 0) + wire.field_int(10, 64) + wire.field_int(11, 64))
    write("fuzz_raylet", "peer_reduce_step", rec(0, wire.REDUCE_STEP, step))
    write("fuzz_raylet", "peer_drop", rec(0, wire.DROP_PARTIALS, ids))
    assemble = (wire.field_bytes(1, OID) + wire.field_int(2, 128) + wire.field_bytes(3, OID)
                + wire.field_bytes(4, NODE) + wire.field_int(5, 0) + wire.field_bytes(6, NODE))
    write("fuzz_raylet", "peer_assemble", rec(0, wire.ASSEMBLE_SLICES, assemble))
    write("fuzz_raylet", "peer_lose", rec(0, wire.LOSE_OBJECTS, ids + wire.field_int(2, 9) + wire.field_bytes(3, b"x")))
    client = rec(1, 1, register)
    put = wire.field_bytes(1, OID) + wire.field_bytes(2, b"value") + wire.field_int(4, 1)
    get = ids + wire.field_int(2, 0)
    create = wire.field_bytes(1, OID) + wire.field_int(2, 4096) + wire.field_int(4, 1)
    write("fuzz_raylet", "client_put_get", client + rec(1, 7, put) + rec(1, wire.GET_OBJECTS, get))
    write("fuzz_raylet", "client_create_seal", client + rec(1, 5, create) + rec(1, 6, wire.field_bytes(1, OID))
          + rec(1, wire.GET_OBJECTS, get) + rec(1, 8, ids))
    write("fuzz_raylet", "client_submit", client + rec(1, wire.SUBMIT_TASK, spec) + rec(1, 4, get + wire.field_int(2, 1)))
    write("fuzz_raylet", "client_actor", client + rec(1, wire.SUBMIT_TASK, actor_spec) + rec(1, 19, wire.field_bytes(
        1, b"\x44" * 16)))
    reduce = (wire.field_bytes(1, OID) + wire.field_bytes(2, OID) + wire.field_bytes(2, OID[:-1] + b"\x02")
              + wire.field_bytes(3, b"sum") + wire.field_int(5, 1000))
    write("fuzz_raylet", "client_reduce", client + rec(1, 7, put) + rec(1, 24, reduce) + rec(1, 25, ids))
    write("fuzz_raylet", "client_refs", client + rec(1, 9, wire.field_bytes(1, OID) + wire.field_bytes(2, OID)))
    write("fuzz_raylet", "mixed", client + rec(1, 7, put) + rec(0, wire.PULL_OBJECT, wire.pull_object(OID))
          + rec(0, wire.FORWARD_TASK, wire.forward_task(spec)) + rec(1, wire.GET_OBJECTS, get))


if __name__ == "__main__":
    wire_seeds()
    raylet_seeds()
    print("seed corpora written under", os.path.join(HERE, "corpus"))
