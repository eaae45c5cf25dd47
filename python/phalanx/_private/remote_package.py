"""A runtime_env working_dir or py_modules entry given as a URI: "https://host/pkg.zip",
"http://...", "file:///path/pkg.zip". The submitting process fetches the zip (with a timeout, within
the size limit) and it travels like a local one. As in Ray, a remote package is a .zip file; a URI of
another scheme, or one that cannot be fetched, is Ray's ValueError naming it and why."""
import io
import urllib.error
import urllib.parse
import urllib.request

import zipfile

SCHEMES = ("http", "https", "file")
_TIMEOUT_S = 30.0


def is_uri(path):
    return isinstance(path, str) and "://" in path


def check(uri, field, where):
    """Raises ValueError (Ray's class) for a URI phalanx cannot fetch, before anything is sent."""
    scheme = urllib.parse.urlparse(uri).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"{where}: runtime_env {field} {uri!r}: the {scheme!r} protocol is not supported here "
                         f"(supported: {', '.join(s + '://' for s in SCHEMES)} or a local directory)")
    if not urllib.parse.urlparse(uri).path.endswith(".zip"):
        raise ValueError(f"{where}: runtime_env {field} {uri!r}: only .zip files are supported for remote URIs")


def fetch(uri, limit):
    """The bytes of the zip at `uri` (at most `limit`); ValueError naming the URI when it cannot be had."""
    try:
        with urllib.request.urlopen(uri, timeout=_TIMEOUT_S) as r:  # noqa: S310 - schemes checked above
            data = r.read(limit + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ValueError(f"runtime_env package {uri!r} cannot be fetched: {getattr(e, 'reason', e)}") from e
    if len(data) > limit:
        raise ValueError(f"runtime_env package {uri!r} is over the limit of {limit >> 20} MiB "
                         "(PHALANX_RUNTIME_ENV_MAX_MB)")
    return data


def without_top_directory(data):
    """A working_dir zip with one top-level directory (what Ray asks of a remote one) as the zip of that
    directory's contents; any other zip as it is."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = [i.filename for i in z.infolist()]
        tops = {n.split("/", 1)[0] for n in names}
        if len(tops) != 1 or not all("/" in n for n in names):
            return data
        top = tops.pop() + "/"
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as w:
            for info in z.infolist():
                rest = info.filename[len(top):]
                if not rest:
                    continue
                info2 = zipfile.ZipInfo(rest, info.date_time)
                info2.external_attr = info.external_attr
                w.writestr(info2, z.read(info))
    return out.getvalue()
