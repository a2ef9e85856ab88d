#!/usr/bin/env bash
# The Slurm job arrays on a real scheduler (CI runs this after scripts/test.sh): installs the
# Debian packages slurm-wlm and munge if they are missing (as root, with apt-get), starts a
# one-node cluster on this machine (scripts/slurm/local-cluster.sh), runs the tests that
# submit to it (crates/cli/tests/slurm_cluster.rs; exactly 2 must run), and stops it. Refuses, naming the reason,
# where the packages cannot be installed or the daemons do not start.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/specx/target}"
start=$(date +%s)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test-slurm: installing slurm-wlm and munge"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
    echo "test-slurm: installed in $(( $(date +%s) - start )) s"
  else
    echo "test-slurm: slurm-wlm and munge are not installed, and installing them needs root and apt-get" >&2
    exit 1
  fi
fi
dir="$(mktemp -d "${TMPDIR:-/tmp}/specx-slurm.XXXXXX")"
trap 'scripts/slurm/local-cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
scripts/slurm/local-cluster.sh start "$dir"
export SLURM_CONF="$dir/slurm.conf"
t0=$(date +%s)
source scripts/lib/counted.sh
counted 2 cargo test --release -j2 -p specx-cli --test slurm_cluster -- --ignored --nocapture --test-threads=1
echo "test-slurm: the cluster tests took $(( $(date +%s) - t0 )) s; $(( $(date +%s) - start )) s in all"
echo "test-slurm: jobs the cluster completed (its jobcomp log):"
awk '{ line = ""; for (i = 1; i <= NF; i++) if ($i ~ /^(JobId|Name|JobState|StartTime|EndTime|ArrayJobId|ArrayTaskId|ExitCode)=/) line = line " " $i; print line }' "$dir/log/jobcomp.txt" 2>/dev/null || true
