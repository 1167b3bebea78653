#!/usr/bin/env bash
# The Slurm path, for real, on this machine: install Debian's slurm-wlm and
# munge if missing, start a single-node slurmctld + slurmd (as root, no
# systemd), then run a small CPU campaign through sbatch twice: (a) one
# allocation running the whole campaign (slurm/campaign-allocation.sbatch),
# (b) a job array, one cell per task (slurm/campaign-array.sbatch), followed
# by exec --resume, select, verify; then (c) slurm/validate-node.sbatch
# records this node as a validation reference and scripts/validate-partition.sh
# validates the partition against it (pass, or inconclusive under this
# machine's noise). Exits non-zero if any step fails.
# Not part of .ci/run: it starts system daemons. Run as root.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh
. scripts/env.sh
for p in slurm-wlm munge; do
  dpkg -s "$p" >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; break; }
done
H=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /var/lib/munge /var/log/munge /etc/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged --force
if [ ! -f /etc/slurm/slurm.conf ]; then
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=commcanary-test
SlurmctldHost=$H
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$H CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
fi
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 20); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo
BIN=$PWD/target/release/commcanary
OUT=$PWD/out/slurm-test-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"
cat > "$OUT/spec.toml" <<'SPEC'
name = "slurm-path"
backend = "cpu"
ranks = 2
repetitions = 2
seed = 11
[launcher]
kind = "srun"
args = ["--mpi=pmix", "--oversubscribe"]
[workload]
phases = "isolated,blocking"
tokens = 4
layers = 4
iters = 5
[analysis]
tie_policy = "interval"
[[configs]]
name = "ring"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "1" }
[[configs]]
name = "binomial"
env = { OMPI_MCA_coll_libnbc_iallreduce_algorithm = "2" }
SPEC
echo "== (a) one allocation"
"$BIN" campaign plan "$OUT/spec.toml" -o "$OUT/a"
COMMCANARY_BIN=$BIN sbatch --wait --ntasks=2 --ntasks-per-node=2 --chdir="$OUT" --output="$OUT/a.out" slurm/campaign-allocation.sbatch "$OUT/a"
cat "$OUT/a.out"
"$BIN" campaign verify "$OUT/a"
echo "== (b) job array, one cell per task"
"$BIN" campaign plan "$OUT/spec.toml" -o "$OUT/b"
N=$("$BIN" inspect "$OUT/b/manifest.json" | grep -c '"cell_id"')
COMMCANARY_BIN=$BIN sbatch --wait --array="1-$N%1" --ntasks=2 --ntasks-per-node=2 --chdir="$OUT" --output="$OUT/b-%a.out" slurm/campaign-array.sbatch "$OUT/b"
"$BIN" campaign exec "$OUT/b" --resume
"$BIN" campaign select "$OUT/b"
"$BIN" campaign verify "$OUT/b"
"$BIN" campaign analyze "$OUT/b"
grep -h '"argv"' "$OUT/b/attempts.jsonl" | head -1 | grep -o '"argv":\["[a-z]*"' 
echo "== (c) validate-node.sbatch: record this node as a reference, then validate the partition against it"
printf 'busbw_min_ratio = 0.2\ntoken_latency_max_ratio = 2.0\n' > "$OUT/site.toml"
VALIDATE_OUT=$OUT/validate-ref COMMCANARY_BIN=$BIN sbatch --wait --nodelist="$H" --ntasks=2 --ntasks-per-node=2 --chdir="$PWD" --output="$OUT/validate-ref.out" \
  slurm/validate-node.sbatch --backend cpu --record-reference --max-bytes 256KiB --iters 5 --warmup-iters 2 --tokens 12 --warmup-tokens 2 --rounds 8
cat "$OUT/validate-ref.out"
REF=$(ls "$OUT"/validate-ref/*.exit | head -1); REF=${REF%.exit}
set +e
VALIDATE_OUT=$OUT/fleet COMMCANARY_BIN=$BIN bash scripts/validate-partition.sh debug "$REF" --ntasks=2 --ntasks-per-node=2 -- --backend cpu --site "$OUT/site.toml" --rounds 8
rc=$?
set -e
[ "$rc" = 0 ] || [ "$rc" = 2 ] || { echo "validate-partition exited $rc (expected 0 pass or 2 inconclusive)"; exit 1; }
echo "slurm path: both templates ran a verified campaign through sbatch, and validate-node.sbatch validated the node ($OUT)"
