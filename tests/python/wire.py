"""phalanx's wire, spoken from Python with nothing but sockets: frames
(core/frame.h), a few protobuf fields encoded by hand, and the client side of
the handshake (core/auth.h). What an attacker (or a peer) has; the security
tests use it to talk to raylets and actor workers as another host would."""
import hashlib
import hmac
import os
import socket
import struct

# rpc::MessageType values (core/proto/phalanx.proto)
SUBMIT_TASK, GET_OBJECTS, KILL_ACTOR, FORWARD_TASK = 2, 3, 17, 18
PULL_OBJECT, RELEASE_HELD, REDUCE_STEP, DROP_PARTIALS = 22, 26, 27, 28
ASSEMBLE_SLICES, LOSE_OBJECTS, DIRECT_HELLO, DIRECT_CALL = 29, 38, 40, 41
DIRECT_DONE = 42
AUTH_HELLO, AUTH_CHALLENGE, AUTH_PROOF = 50, 51, 52
REPLY = 1

# Every type a peer could send (the handshake's own are tried separately).
ALL_TYPES = [t for t in range(1, 64) if t not in (AUTH_HELLO, AUTH_CHALLENGE, AUTH_PROOF)]


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def field_int(num, value):
    return varint(num << 3) + varint(value & 0xFFFFFFFFFFFFFFFF)


def field_double(num, value):
    return varint(num << 3 | 1) + struct.pack("<d", value)


def parse(body):
    """{field number: [values]} of a protobuf message (varints as ints, bytes as bytes)."""
    out, i = {}, 0
    while i < len(body):
        key, i = _read_varint(body, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _read_varint(body, i)
        elif wire == 2:
            n, i = _read_varint(body, i)
            v, i = body[i:i + n], i + n
        elif wire == 1:
            v, i = body[i:i + 8], i + 8
        elif wire == 5:
            v, i = body[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(num, []).append(v)
    return out


def _read_varint(b, i):
    shift = n = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def frame(msg_type, body=b"", request_id=1, flags=0, length=None):
    """A frame; `length` overrides the declared body length (to lie about it)."""
    return struct.pack("<IHHQ", len(body) if length is None else length, msg_type, flags, request_id) + body


def read_frame(sock):
    """(type, flags, request_id, body), or None if the peer closed the connection."""
    head = _read_exact(sock, 16)
    if head is None:
        return None
    length, msg_type, flags, req = struct.unpack("<IHHQ", head)
    body = _read_exact(sock, length)
    return None if body is None else (msg_type, flags, req, body)


def _read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def closed_without_answer(sock, timeout=5.0):
    """True if the peer closes the connection having sent nothing back."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def connect(host, port, timeout=5.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def handshake(sock, token):
    """The client side of the handshake with `token` (str). Raises if the
    server does not prove the same token."""
    key = token.encode()
    nonce = os.urandom(32)
    sock.sendall(frame(AUTH_HELLO, field_int(1, 1) + field_bytes(2, nonce), request_id=0))
    got = read_frame(sock)
    if got is None or got[0] != AUTH_CHALLENGE:
        raise ConnectionError(f"no challenge from the server: {got!r}")
    fields = parse(got[3])
    server_nonce, server_proof = fields[1][0], fields[2][0]
    want = hmac.new(key, b"phalanx-auth-1 server" + nonce + server_nonce, hashlib.sha256).digest()
    if not hmac.compare_digest(want, server_proof):
        raise ConnectionError("the server does not hold the token")
    proof = hmac.new(key, b"phalanx-auth-1 client" + server_nonce + nonce, hashlib.sha256).digest()
    sock.sendall(frame(AUTH_PROOF, field_bytes(1, proof), request_id=0))


def task_spec(task_id, name="f", num_returns=1, extra=b""):
    """A TaskSpec: task_id(1), function_id(2), function_name(3), num_returns(5), num_cpus(6)."""
    return (field_bytes(1, task_id) + field_bytes(2, b"fn:" + name.encode()) + field_bytes(3, name.encode())
            + field_int(5, num_returns) + field_double(6, 0.0) + extra)


def forward_task(spec, from_node=b"\x01" * 16):
    return field_bytes(1, spec) + field_bytes(2, from_node)


def pull_object(object_id, length=1 << 20):
    return field_bytes(1, object_id) + field_int(2, 0) + field_int(3, length)


def kill_actor(actor_id):
    return field_bytes(1, actor_id) + field_int(2, 1)
