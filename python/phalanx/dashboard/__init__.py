"""The dashboard (docs/observability.md): a web page served from the head
node that shows the cluster as it runs: nodes with their CPU, GPU and store
use, actors with their state and restarts, tasks by name and state, the
largest objects and what keeps them, collective steps and copies of the
last minutes, link throughput between nodes over time, and the timeline of
the last minute. Every figure comes from the runtime's own counters
(phalanx.dashboard.data).

    phalanx dashboard [--address HOST:PORT] [--host 127.0.0.1] [--port 8265]
    phalanx start --head --dashboard

It listens on loopback by default. On any other address it asks for the
cluster token (PHALANX_CLUSTER_TOKEN): open http://HOST:PORT/?token=TOKEN
once (the page keeps it in a cookie), or send `Authorization: Bearer TOKEN`.
The server is aiohttp (`pip install phalanx[dashboard]`)."""
import asyncio
import hmac
import ipaddress
import json
import os
import threading

from phalanx.dashboard.data import Rings, snapshot

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
COOKIE = "phalanx_token"


def _loopback(host):
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_app(snapshot, token=None):
    """The aiohttp application: `snapshot()` gives the page's JSON; `token`
    (None: none asked, for loopback) is required on every request."""
    from aiohttp import web

    def allowed(request):
        if token is None:
            return True
        given = request.cookies.get(COOKIE, "")
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            given = auth[len("Bearer "):]
        return bool(given) and hmac.compare_digest(given.encode(), token.encode())

    @web.middleware
    async def guard(request, handler):
        if token is not None and request.path == "/" and "token" in request.query:
            if not hmac.compare_digest(request.query["token"].encode(), token.encode()):
                return web.Response(status=401, text="phalanx dashboard: wrong token\n")
            resp = web.HTTPFound("/")  # (the token leaves the address bar and goes to a cookie)
            resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
            raise resp
        if not allowed(request):
            return web.Response(status=401, text="phalanx dashboard: this address needs the cluster token: open "
                                                 "/?token=PHALANX_CLUSTER_TOKEN once, or send Authorization: "
                                                 "Bearer TOKEN\n")
        resp = await handler(request)
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Content-Security-Policy"] = "default-src 'self'; style-src 'self' 'unsafe-inline'"
        return resp

    lock = asyncio.Lock()  # one snapshot at a time: many open pages share it
    cache = {"at": 0.0, "body": None}

    async def api_snapshot(request):
        loop = asyncio.get_running_loop()
        async with lock:
            if cache["body"] is None or loop.time() - cache["at"] > 1.0:
                try:
                    data = await loop.run_in_executor(None, snapshot)
                    cache["body"] = json.dumps(data, default=str)
                except Exception as e:  # noqa: BLE001 - the page shows why
                    cache["body"] = json.dumps({"error": f"{type(e).__name__}: {e}"})
                cache["at"] = loop.time()
        return web.Response(text=cache["body"], content_type="application/json")

    async def index(request):
        return web.FileResponse(os.path.join(STATIC, "index.html"))

    app = web.Application(middlewares=[guard])
    app.router.add_get("/", index)
    app.router.add_get("/api/snapshot", api_snapshot)
    app.router.add_static("/static/", STATIC)
    return app


def serve(host="127.0.0.1", port=8265, token=None, ready=None, stop=None):
    """Serves the dashboard of the cluster this process is connected to
    (phalanx.init first) until `stop` (a threading.Event) is set, or forever.
    Off loopback, `token` defaults to PHALANX_CLUSTER_TOKEN and is required.
    `ready(port)` runs once it listens (port 0 picks a free one)."""
    from aiohttp import web

    if not _loopback(host):
        token = token or os.environ.get("PHALANX_CLUSTER_TOKEN")
        if not token:
            raise ValueError(f"the dashboard on {host} (not loopback) needs the cluster token: set "
                             "PHALANX_CLUSTER_TOKEN")
    rings = Rings()  # (each snapshot asks the nodes only for what is new since the last)
    app = make_app(lambda: snapshot(rings=rings), token)

    async def main():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]
        if ready:
            ready(bound)
        try:
            while stop is None or not stop.is_set():
                await asyncio.sleep(0.2)
        finally:
            await runner.cleanup()

    asyncio.run(main())


def start_in_thread(host="127.0.0.1", port=0, token=None):
    """Serves in a thread of this process; returns (port, stop event)."""
    got, stop = {}, threading.Event()
    listening = threading.Event()

    def ready(p):
        got["port"] = p
        listening.set()

    def run():
        try:
            serve(host, port, token, ready, stop)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            got["error"] = e
            listening.set()

    threading.Thread(target=run, name="phalanx-dashboard", daemon=True).start()
    if not listening.wait(30):
        raise TimeoutError("the dashboard did not start listening within 30 s")
    if "error" in got:
        raise got["error"]
    return got["port"], stop
