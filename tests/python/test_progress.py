"""Progress on long work (docs/observability.md): a get that waits on a copy
from another node for longer than the raylet's --copy-progress-ms is told,
on the driver's stderr, how many bytes are here, the rate and the time
left; a get that does not wait that long is told nothing."""
import numpy as np

import phalanx

from conftest import loopback_nodes

MIB = 1 << 20
SLOW = ["--transfer-chunk-bytes", "4096", "--transfer-window", "1", "--copy-progress-ms", "200"]


@phalanx.remote(resources={"b": 0.01})
def _big(n):
    return np.full(n, 3.0, dtype=np.float32)


def test_a_long_copy_reports_its_progress_to_the_waiting_get(capfd):
    with loopback_nodes([None, {"b": 1}], extra_args=SLOW):
        small = _big.remote(1024)  # 4 KiB: one range
        assert phalanx.get(small, timeout=60)[0] == 3.0
        capfd.readouterr()
        ref = _big.remote(32 * MIB)  # 128 MiB in 4 KiB ranges, one at a time: over a second
        out = phalanx.get(ref, timeout=120)
        assert out.shape == (32 * MIB,) and out[-1] == 3.0
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"phalanx: copying object {ref.hex()}")]
    assert lines, err
    assert "(128.0 MiB) from node" in lines[0] and " MiB here after " in lines[0] and "MB/s, about" in lines[0]
    assert "warning" not in lines[0]
