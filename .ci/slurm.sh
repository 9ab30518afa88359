#!/usr/bin/env bash
# Start a single-node Slurm (munge, slurmctld, slurmd) for the executor tests.
# Idempotent; as root. Source it (`source .ci/slurm.sh`) to get SLURM_CONF exported.
# Recipe: ../shared/notes/slurm-local.md (cgroup plugins do not work on these machines).
set -euo pipefail
KIT_SLURM_DIR=${KIT_SLURM_DIR:-/tmp/kit-slurm}
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge "$KIT_SLURM_DIR"/{state,spool}
chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 1024 ))
cat > "$KIT_SLURM_DIR/slurm.conf" <<CONF
ClusterName=kitlocal
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$KIT_SLURM_DIR/state
SlurmdSpoolDir=$KIT_SLURM_DIR/spool
SlurmctldPidFile=$KIT_SLURM_DIR/slurmctld.pid
SlurmdPidFile=$KIT_SLURM_DIR/slurmd.pid
SlurmctldLogFile=$KIT_SLURM_DIR/slurmctld.log
SlurmdLogFile=$KIT_SLURM_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=3600
NodeName=localhost CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
CONF
export SLURM_CONF="$KIT_SLURM_DIR/slurm.conf"
[ -f "$KIT_SLURM_DIR/slurmctld.pid" ] && kill -0 "$(cat "$KIT_SLURM_DIR/slurmctld.pid")" 2>/dev/null || slurmctld -f "$SLURM_CONF"
[ -f "$KIT_SLURM_DIR/slurmd.pid" ] && kill -0 "$(cat "$KIT_SLURM_DIR/slurmd.pid")" 2>/dev/null || slurmd -f "$SLURM_CONF" -N localhost
for _ in $(seq 1 60); do
    if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then break; fi
    scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
    sleep 1
done
sinfo
echo "export SLURM_CONF=$SLURM_CONF"
