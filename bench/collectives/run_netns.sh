#!/usr/bin/env bash
# A collectives benchmark on an emulated cluster: N network namespaces with
# RATE links (../shared/bench/peers/netns.sh), one raylet each, the driver on
# node 0; then, on the same namespaces and in the same run, Ray (one `ray
# start` per namespace, driven by the same script) and the peers of
# ../shared/bench/peers (OpenMPI and Gloo by default), and a table of all.
# Needs root and iproute2; the peers need their Debian packages
# (bench/collectives/install_peers.sh), Ray the pip extra 'bench'
# (scripts/bench.sh). The namespaces are removed at the end.
#   N=8 RATE=1gbit SIZES=33554432 bench/collectives/run_netns.sh [broadcast.py|reduce.py|all] [its flags]
#   PEERS="ray mpi gloo-cpp torch-gloo dask" ...   which peers (PEERS=none: phalanx only)
#   TLS=1 ...      phalanx with --tls;  TLS=both ...  phalanx plain and with --tls, both in the table
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS_DIR=${PEERS_DIR:-$ROOT/../shared/bench/peers}
NETNS=${NETNS:-$PEERS_DIR/netns.sh}
N=${N:-8} RATE=${RATE:-1gbit} SIZES=${SIZES:-33554432}
if [ -z "${PEERS:-}" ]; then  # the default: the peers whose packages are here
  PEERS=""
  "$ROOT/.venv/bin/python" -c "import ray" 2>/dev/null && PEERS="ray"
  command -v mpirun >/dev/null && /usr/bin/python3 -c "import mpi4py, numpy" 2>/dev/null && PEERS="$PEERS mpi"
  [ -e /usr/include/gloo/allreduce.h ] && PEERS="$PEERS gloo-cpp"
  PEERS=${PEERS:-none}
fi
RAY=none
case " $PEERS " in *" ray "*) RAY=ray ;; esac
PEERS=$(echo " $PEERS " | sed 's/ ray / /g; s/^ *//; s/ *$//')  # the rest: ../shared/bench/peers's
PEERS=${PEERS:-none}
[ -f "$NETNS" ] || { echo "netns.sh not found at $NETNS (set PEERS_DIR=...)" >&2; exit 2; }
SCRIPTS=(broadcast.py)
case "${1:-}" in
  all) SCRIPTS=(broadcast.py reduce.py); shift ;;
  *.py) SCRIPTS=("$1"); shift ;;
esac
OUT=$(mktemp -d /tmp/phalanx-netns.XXXXXX)
stop_ray() { [ "$RAY" = none ] || "$ROOT/.venv/bin/ray" stop --force >/dev/null 2>&1 || true; }
trap 'stop_ray; bash "$NETNS" down >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT

case "${TLS:-0}" in
  0) TLS_RUNS=(0) ;; 1) TLS_RUNS=(1) ;; both) TLS_RUNS=(0 1) ;;
  *) echo "TLS wants 0, 1 or both" >&2; exit 2 ;;
esac
bash "$NETNS" up "$N" "$RATE" 100us >/dev/null
for script in "${SCRIPTS[@]}"; do
  for tls in "${TLS_RUNS[@]}"; do
    peers=$RAY; [ "$tls" = "${TLS_RUNS[0]}" ] || peers=none  # (Ray once)
    ip netns exec pnode0 env PHALANX_TLS="$tls" "$ROOT/.venv/bin/python" "$HERE/$script" --netns --nodes "$N" \
      --rate "$RATE" --sizes "$SIZES" --peers "$peers" "$@" | tee -a "$OUT/phalanx.csv"
  done
done
bash "$NETNS" down >/dev/null

FILES=("$OUT/phalanx.csv")
if [ "$PEERS" != none ]; then
  echo "# peers on the same namespaces: $PEERS"
  WORLDS=$N SIZES=$SIZES RATE=$RATE PEERS="$PEERS" OUT="$OUT/peers.csv" bash "$PEERS_DIR/collectives.sh" --netns \
    >"$OUT/peers.log" 2>&1 || echo "# the peers' run failed: $(tail -3 "$OUT/peers.log")"
  grep -v '^peer,' "$OUT/peers.csv" 2>/dev/null || true
  FILES+=("$OUT/peers.csv")
fi
echo
(cd "$HERE" && "$ROOT/.venv/bin/python" compare.py --rate "$RATE" "${FILES[@]}")
