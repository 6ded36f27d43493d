#!/usr/bin/env bash
# The whole benchmark suite in one command (about 70 minutes on 2 cores).
#
#   benchmarks/run_all.sh [--quick]
#
# Every scenario prints JSON lines (collected in $RESULTS, default
# benchmarks/results/<date>.jsonl) and appends its table to the end of $MARKDOWN
# (default docs/benchmarks.md, whose last section, "New runs", receives them); the
# targets table is appended last. --quick runs every
# scenario small (minutes, for checking the scripts, not for numbers).
# PNG plots go to docs/img/. Needs the bench extra: pip install -e '.[bench]'.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MARKDOWN=${MARKDOWN:-docs/benchmarks.md}
mkdir -p benchmarks/results docs/img
RESULTS=${RESULTS:-benchmarks/results/$(date +%Y-%m-%d-%H%M).jsonl}
IMG=docs/img

if [[ "${1:-}" == "--quick" ]]; then
    NODE_INIT=(--nodes 50 200) CHURN=(--services 50 --waves 1 5) BURST=(--services 5 --nodes 10) IDLE=(--nodes 300 --services 50 --duration 20)
    START=(--nodes 300 --services 50 --runs 1) LB=(--services 50) FAILOVER=(--runs 1)
    IPPOOL=(--services 100)
    MARKDOWN=/dev/null IMG=$(mktemp -d)
else
    NODE_INIT=() CHURN=() BURST=() IDLE=() START=() LB=() FAILOVER=() IPPOOL=()
fi

run() {
    echo "== $* (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$PY" "$@" | tee -a "$RESULTS"
}

"$PY" - <<'PY' | tee -a "$RESULTS"
import json, sys
sys.path.insert(0, "benchmarks")
from _bench import header
from kube_ccm.testing.binaries import ensure_binaries
print(json.dumps({"benchmark": "header", **header(ensure_binaries())}))
PY

run benchmarks/controlplane_startup.py --runs 3 --settle 3
run benchmarks/node_init.py "${NODE_INIT[@]}" --markdown "$MARKDOWN" --plot "$IMG/node_init.png"
run benchmarks/lb_provisioning.py "${LB[@]}" --kube-api-qps 1000 --kube-api-burst 2000 --markdown "$MARKDOWN"
run benchmarks/ippool_allocation.py "${IPPOOL[@]}" --kube-api-qps 1000 --kube-api-burst 2000 \
    --markdown "$MARKDOWN"
run benchmarks/node_churn.py "${CHURN[@]}" --markdown "$MARKDOWN"
(cd benchmarks && "../$PY" node_burst.py "${BURST[@]}" --markdown "../$MARKDOWN") | tee -a "$RESULTS"
run benchmarks/failover.py "${FAILOVER[@]}" --markdown "$MARKDOWN"
# The large ones back to back, last.
run benchmarks/startup.py "${START[@]}" --markdown "$MARKDOWN"
run benchmarks/idle.py "${IDLE[@]}" --markdown "$MARKDOWN" --plot "$IMG/idle.png" \
    --profile "$IMG/idle-profile.svg"
"$PY" benchmarks/targets.py "$RESULTS" --markdown "$MARKDOWN"
echo "results: $RESULTS" >&2
