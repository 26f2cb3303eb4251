#!/usr/bin/env bash
# scripts/slurm/ on a real one-node Slurm cluster started here from Debian's
# packages: munged, slurmctld and slurmd run as plain processes (no systemd, no
# cgroups) with a minimal slurm.conf for this machine in a temporary folder,
# and are stopped at the end whatever happens. submit.sh sends a 3-task job
# array over the tiny model and a folder of images plus a merge job that
# waits for it (afterok); the merged file must equal one qvl ocr run over the
# same folder but for "ms". When a piece of Slurm cannot run here, the test
# says which and skips (77).
source "$(dirname "$0")/common.sh" "$@"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
skip() {
  echo "skipped: $*"
  exit 77
}
for tool in munged munge unmunge slurmctld slurmd sbatch squeue scontrol sinfo scancel; do
  command -v $tool > /dev/null || skip "$tool is not installed (Debian packages munge, slurmctld, slurmd, slurm-client)"
done
QVL=$(realpath "$QVL") MODEL=$(realpath "$MODEL")
mkdir -p "$QVL_CACHE_DIR" && QVL_CACHE_DIR=$(realpath "$QVL_CACHE_DIR")

SL="$TMP/slurm"
mkdir -p "$SL/munge" "$SL/state" "$SL/spool" "$SL/log"
export SLURM_CONF="$SL/slurm.conf"
daemons=()  # "name pid"

# Stops what this test started, by pid: the jobs first, then the daemons, then
# any process still running from this test's folder (a job's qvl).
stop_cluster() {
  if [ -n "$(pidof_daemon slurmctld)" ]; then
    scancel --quiet --user "$(id -un)" 2> /dev/null
    for _ in $(seq 20); do [ -z "$(squeue -h 2> /dev/null)" ] && break; sleep 0.5; done
  fi
  local entry name pid
  for entry in slurmd slurmctld munged; do
    pid=$(pidof_daemon $entry)
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2> /dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
  done
  for pid in $(ps -eo pid=,args= | awk -v dir="$TMP" 'index($0, dir) { print $1 }'); do
    [ "$pid" != $$ ] && kill -KILL "$pid" 2> /dev/null
  done
}
pidof_daemon() {
  local entry
  for entry in "${daemons[@]}"; do [ "${entry% *}" = "$1" ] && echo "${entry#* }"; done
}
trap 'stop_cluster; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
# last_lines FILE...: the end of logs, for a skip or a failure to show.
last_lines() { tail -n 5 "$@" 2> /dev/null | sed 's/^/  /'; }

# --- munge: a fresh key, a socket in the temporary folder.
head -c 1024 /dev/urandom > "$SL/munge/munge.key"
chmod 700 "$SL/munge" && chmod 600 "$SL/munge/munge.key"
munged --foreground --force --socket="$SL/munge/socket" --key-file="$SL/munge/munge.key" \
  --pid-file="$SL/munge/munged.pid" --seed-file="$SL/munge/seed" --log-file="$SL/log/munged.log" \
  > "$SL/log/munged.out" 2>&1 &
daemons+=("munged $!")
for _ in $(seq 50); do [ -S "$SL/munge/socket" ] && break; sleep 0.1; done
munge -S "$SL/munge/socket" -n 2> "$SL/log/munge.err" | unmunge -S "$SL/munge/socket" > /dev/null 2>> "$SL/log/munge.err" ||
  skip "munged does not run here (credentials for Slurm): $(last_lines "$SL/log/munged.out" "$SL/log/munge.err")"

# --- slurm.conf: this machine as the only node, free ports, nothing that needs cgroups or a database.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
node=$(hostname -s 2> /dev/null || hostname)
cat > "$SLURM_CONF" <<EOF
ClusterName=qvltest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SL/munge/socket
StateSaveLocation=$SL/state
SlurmdSpoolDir=$SL/spool
SlurmctldPidFile=$SL/slurmctld.pid
SlurmdPidFile=$SL/slurmd.pid
SlurmctldLogFile=$SL/log/slurmctld.log
SlurmdLogFile=$SL/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc)
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -i -f "$SLURM_CONF" > "$SL/log/slurmctld.out" 2>&1 &
daemons+=("slurmctld $!")
for _ in $(seq 100); do scontrol ping 2> /dev/null | grep -q 'is UP' && break; sleep 0.1; done
scontrol ping 2> /dev/null | grep -q 'is UP' ||
  skip "slurmctld does not start here: $(last_lines "$SL/log/slurmctld.out" "$SL/log/slurmctld.log")"
slurmd -D -N "$node" -f "$SLURM_CONF" > "$SL/log/slurmd.out" 2>&1 &
daemons+=("slurmd $!")
for _ in $(seq 150); do [ "$(sinfo -h -o %t 2> /dev/null)" = idle ] && break; sleep 0.1; done
[ "$(sinfo -h -o %t 2> /dev/null)" = idle ] ||
  skip "slurmd does not register its node here (state '$(sinfo -h -o %t 2>&1)'): $(last_lines "$SL/log/slurmd.out" "$SL/log/slurmd.log")"
echo "ok: a one-node Slurm cluster is up ($(sinfo -h -o '%N %c CPUs %t'), slurmctld port $ctld_port)"

# --- The job: a folder with a subfolder, copies and a bad file (its shard exits 3, which must not stop the merge).
IN="$TMP/archive"
mkdir -p "$IN/sub"
for i in 1 2 3 4 5 6; do { cat "$DATA/images/small.png"; printf '%s' "$i"; } > "$IN/p$i.png"; done
cp "$DATA/images/photo.jpg" "$IN/sub/photo.jpg"
cp "$IN/p1.png" "$IN/sub/p1-copy.png"
printf 'hello' > "$IN/sub/notes.png"
ARGS=(--model "$MODEL" --dtype f32 -n 4 --recursive "$IN")
"$QVL" ocr --threads 1 "${ARGS[@]}" --output "$TMP/single.jsonl" 2> "$TMP/single.err"
check "one run over the folder exits 3 (one bad file)" "[ $? -eq 3 ] || dump '$TMP/single.err'"

OUT="$TMP/out"
(cd "$TMP" && QVL="$QVL" QVL_SBATCH_ARGS="--cpus-per-task=1" "$ROOT/scripts/slurm/submit.sh" 3 "$OUT" "${ARGS[@]}") \
  > "$TMP/submit.out" 2>&1
check "submit.sh submits the array and the merge job" \
  "grep -q 'array job [0-9]* (3 shards) and merge job [0-9]*' '$TMP/submit.out' || dump '$TMP/submit.out'"
read -r array merge < <(sed -n 's/.*array job \([0-9]*\) .* merge job \([0-9]*\).*/\1 \2/p' "$TMP/submit.out")
t0=$(date +%s)
while [ -n "$(squeue -h 2> /dev/null)" ] && [ $(($(date +%s) - t0)) -lt 100 ]; do sleep 1; done
check "the jobs finished within 100 s ($(($(date +%s) - t0)) s)" "[ -z \"\$(squeue -h)\" ] || { squeue; false; }"
for k in 0 1 2; do
  check "array task $k ran shard $k/3 under Slurm and COMPLETED" \
    "grep -q 'qvl ocr: shard $k/3: ' '$OUT/logs/shard-$k.log' && scontrol show job '${array}_$k' | grep -q 'JobState=COMPLETED' || dump '$OUT/logs/shard-$k.log'"
done
check "the merge job ran after them (afterok) and COMPLETED" \
  "scontrol show job '$merge' | grep -q 'JobState=COMPLETED' || { scontrol show job '$merge'; dump '$OUT/logs/merge.log'; }"
check "... saying every input is there once" \
  "grep -q '9 records (1 errors) for 9 inputs from 3 shard outputs, each input once' '$OUT/logs/merge.log' || dump '$OUT/logs/merge.log'"
python3 - "$TMP/single.jsonl" "$OUT/merged.jsonl" <<'PY' && echo "ok: merged.jsonl equals one run, but for ms" || { echo "FAIL: merged.jsonl equals one run, but for ms"; fail=1; }
import json, sys
a, b = ([{k: v for k, v in json.loads(l).items() if k != "ms"} for l in open(f)] for f in sys.argv[1:])
assert len(a) == 9 and a == b, f"{len(a)} vs {len(b)} records, or they differ"
PY
if [ $fail -ne 0 ]; then last_lines "$SL/log/slurmctld.log" "$SL/log/slurmd.log"; fi

stop_cluster
left=""
for entry in "${daemons[@]}"; do kill -0 "${entry#* }" 2> /dev/null && left+=" ${entry% *}"; done
check "munged, slurmctld and slurmd are stopped" "[ -z '$left' ] || { echo 'still running:$left'; false; }"
daemons=()
exit $fail
