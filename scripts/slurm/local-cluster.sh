#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and for trying `specx slurm`:
#
#   scripts/slurm/local-cluster.sh start DIR   # munged, slurmctld and slurmd; prints SLURM_CONF
#   scripts/slurm/local-cluster.sh stop DIR
#
# Everything lives in DIR (config, munge key and socket, state, logs); nothing under /etc is
# touched. Needs the Debian packages slurm-wlm and munge, and root (slurmd starts the jobs as
# their user). The node is this machine with the CPUs and memory `slurmd -C` finds; jobs
# share it by CPU. Completed jobs are logged to DIR/log/jobcomp.txt (sacct needs slurmdbd and
# a database, which this cluster does not run).
set -euo pipefail
cmd="${1:-}"
dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

stop() {
  for p in slurmd slurmctld; do
    [ -f "$dir/run/$p.pid" ] && kill "$(cat "$dir/run/$p.pid")" 2>/dev/null || true
  done
  [ -S "$dir/run/munge.socket" ] && munged --stop --socket="$dir/run/munge.socket" >/dev/null 2>&1 || true
  rm -f "$dir"/run/*.pid
}

fail() {
  echo "local-cluster: $1" >&2
  for f in "$dir"/log/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  stop
  exit 1
}

case "$cmd" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "local-cluster: unknown command '$cmd' (start or stop)" >&2; exit 2 ;;
esac

for b in munged slurmctld slurmd sbatch squeue; do
  command -v "$b" >/dev/null || { echo "local-cluster: $b not found: install the Debian packages slurm-wlm and munge (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "local-cluster: needs root (slurmd starts each job as its user)" >&2; exit 1; }
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
chmod 700 "$dir/run"

[ -f "$dir/munge.key" ] || { head -c 1024 /dev/urandom > "$dir/munge.key"; chmod 400 "$dir/munge.key"; }
munged --force --socket="$dir/run/munge.socket" --key-file="$dir/munge.key" --log-file="$dir/log/munged.log" \
  --pid-file="$dir/run/munged.pid" --seed-file="$dir/run/munged.seed" || fail "munged did not start"

node="$(slurmd -C | sed -n 1p)"  # sed reads it all: no SIGPIPE under pipefail
case "$node" in NodeName=*) ;; *) fail "slurmd -C did not describe this node: $node" ;; esac
port="${SPECX_SLURM_PORT:-16817}"
cat > "$dir/slurm.conf" <<CONF
ClusterName=specx-local
SlurmctldHost=$(hostname)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.socket
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
$node State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -c || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
for _ in $(seq 60); do
  state="$(sinfo --noheader --format=%T 2>/dev/null || true)"
  case "$state" in idle*|mixed*|allocated*) echo "export SLURM_CONF=$dir/slurm.conf"; exit 0 ;; esac
  sleep 0.5
done
fail "the node did not come up in 30 s (sinfo: ${state:-no answer})"
