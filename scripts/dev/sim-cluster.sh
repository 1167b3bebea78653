#!/usr/bin/env bash
# A simulated Slurm cluster of real daemons on this one machine (issue 27).
#   bash scripts/dev/sim-cluster.sh up N       # N compute nodes (1 to 16), smoke-tested
#   bash scripts/dev/sim-cluster.sh status     # namespaces, addresses, host names, daemons, sinfo
#   bash scripts/dev/sim-cluster.sh env        # the exports that talk to it (eval "$(… env)")
#   bash scripts/dev/sim-cluster.sh exec NODE CMD...   # run CMD on a node (sim-n1 …, sim-ctl)
#   bash scripts/dev/sim-cluster.sh down       # remove everything `up` made, then check that nothing is left
#
# Each node is a network namespace (its own address on one Linux bridge,
# ccsim-br, $SIM_NET.0/24) plus a UTS namespace (its own host name), running
# its own `slurmd` (and `sshd`, for mpirun's ssh launcher). One more
# namespace, sim-ctl, runs `slurmctld`. The host's own namespaces are the
# login node: `munged` runs there (its socket is a path, reachable from every
# namespace), and sbatch/squeue talk to sim-ctl over the bridge. Separate
# namespaces rather than Slurm's multiple-slurmd mode: every daemon binds the
# standard ports on its own address, gethostname() differs per node (so each
# shard header records its node), and slurmd's -N/%n files keep spools apart.
# What it shares that a real cluster would not: scripts/dev/sim-cluster.md.
#
# Everything lives under $SIM_STATE (default /run/sim-cluster): the Slurm
# config, munge key and socket, ssh keys, spools, logs, pid files, the UTS
# namespace files and each node's hosts file, /tmp and /dev/shm (bind-mounted
# inside the node only). Nothing in /etc is edited. The host's
# own munged, slurmctld, slurmd or sshd (if any) are not touched: different
# socket, config and network namespace.
#
# Needs root (namespaces, bridge, daemons). Not part of CI: CI lacks the
# privileges; scripts/dev/sim-cluster-campaign.sh drives it end to end.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
STATE=${SIM_STATE:-/run/sim-cluster}
NET=${SIM_NET:-10.213.0}
BR=ccsim-br
P=ccsim # prefix of every namespace and link this script makes

die() { echo "sim-cluster: $*" >&2; exit 1; }
# The mark `up` leaves in the state directory it made: `down` removes (and
# kills what is recorded in) only a directory that holds it.
MARK=.sim-cluster-state
MAGIC="commcanary sim-cluster state v1"
owned_state() { [ -d "$STATE" ] && [ ! -L "$STATE" ] && [ -f "$STATE/$MARK" ] && [ ! -L "$STATE/$MARK" ] && head -1 "$STATE/$MARK" | grep -qxF "$MAGIC"; }
# The start time of process $1 (/proc/PID/stat field 22, in clock ticks since
# boot): with its pid, what tells the process `up` started from a later one
# that reused the pid.
proc_start() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  s=${s##*) }
  set -- $s
  echo "${20:-}"
}
say() { echo "sim-cluster: $*" >&2; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, a bridge, system daemons)"

# node NAME -> namespace and address
ns_of() { echo "$P-${1#sim-}"; }          # sim-n1 -> ccsim-n1, sim-ctl -> ccsim-ctl
addr_of() { case $1 in sim-ctl) echo "$NET.2" ;; sim-n*) echo "$NET.$((10 + ${1#sim-n}))" ;; *) die "unknown node $1" ;; esac; }
nodes() { cat "$STATE/nodes" 2>/dev/null; } # sim-ctl sim-n1 … sim-nN, one per line

# Run a command on a node: its network namespace, its UTS namespace (its host
# name) and a mount namespace of its own in which the node's hosts file is
# bind-mounted over /etc/hosts and node-local directories over /tmp and
# /dev/shm (a real node's are its own: Slurm's PMIx plugin, for one, makes
# /tmp/spmix_appdir_<uid>_<job>.<step> on every node and fails if it exists).
# Everything else stays shared with the host: one filesystem. Not `ip netns
# exec`: it remounts /sys, which hides /sys/fs/cgroup, and slurmd refuses to
# start without it. Everything execs, so the pid of this command is CMD's.
nsx() {
  local node=$1; shift
  ${NSX_EXEC:-} nsenter --net="/run/netns/$(ns_of "$node")" --uts="$STATE/uts/$node" -- \
    unshare --mount --propagation slave -- \
    sh -c 'mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/tmp" /tmp && mount --bind "$0/shm" /dev/shm && exec "$@"' "$STATE/node/$node" "$@"
}

# Start a daemon in the background, detached (own session, no tty, output in
# $STATE/log/NAME.out), and record its pid in $STATE/pids/NAME. With a NODE
# other than "-" it runs on that node (bash, nsenter, unshare and sh all
# exec, so the recorded pid ends up the daemon's).
start_daemon() {
  local name=$1 node=$2; shift 2
  if [ "$node" = - ]; then
    setsid "$@" </dev/null >"$STATE/log/$name.out" 2>&1 &
  else
    setsid bash "$ROOT/scripts/dev/sim-cluster.sh" exec-raw "$node" "$@" </dev/null >"$STATE/log/$name.out" 2>&1 &
  fi
  echo "$! $(proc_start $!)" >"$STATE/pids/$name"
}

need_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
  command -v ssh >/dev/null || missing+=(openssh-client)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v nsenter >/dev/null || missing+=(util-linux)
  command -v mpicc >/dev/null || missing+=(libopenmpi-dev openmpi-bin)
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

write_slurm_conf() {
  local n=$1 cpus mem
  cpus=$(nproc)
  # every node claims the host's cores (they share them) and a slice of memory
  mem=$(($(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / (n + 1)))
  {
    cat <<CONF
# Written by scripts/dev/sim-cluster.sh up $n; removed by down.
ClusterName=ccsim
SlurmctldHost=sim-ctl($NET.2)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket.2
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# no default MPI plugin: the templates must ask for --mpi=pmix themselves
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
KillWait=5
MailProg=/bin/true
CONF
    for i in $(seq 1 "$n"); do
      echo "NodeName=sim-n$i NodeAddr=$(addr_of "sim-n$i") CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=sim Nodes=sim-n[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } >"$STATE/etc/slurm.conf"
}

write_ssh() {
  local n=$1
  ssh-keygen -q -t ed25519 -N '' -C ccsim-host -f "$STATE/ssh/host_ed25519_key"
  ssh-keygen -q -t ed25519 -N '' -C ccsim-root -f "$STATE/ssh/id_ed25519"
  cp "$STATE/ssh/id_ed25519.pub" "$STATE/ssh/authorized_keys"
  cat >"$STATE/ssh/sshd_config" <<CONF
HostKey $STATE/ssh/host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AuthorizedKeysFile $STATE/ssh/authorized_keys
PrintMotd no
AcceptEnv OMPI_* COMMCANARY_* SLURM_CONF
CONF
  : >"$STATE/ssh/known_hosts"
  : >"$STATE/ssh/ssh_config"
  local key
  key=$(cut -d' ' -f1-2 "$STATE/ssh/host_ed25519_key.pub")
  for node in $(nodes); do
    echo "$node,$(addr_of "$node") $key" >>"$STATE/ssh/known_hosts"
    printf 'Host %s\n  HostName %s\n' "$node" "$(addr_of "$node")" >>"$STATE/ssh/ssh_config"
  done
  cat >>"$STATE/ssh/ssh_config" <<CONF
Host *
  User root
  IdentityFile $STATE/ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $STATE/ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
CONF
}

print_env() {
  cat <<ENV
export SLURM_CONF=$STATE/etc/slurm.conf
export OMPI_MCA_plm_rsh_agent="ssh -F $STATE/ssh/ssh_config"
export OMPI_MCA_btl=tcp,self
export OMPI_MCA_pml=ob1
export PMIX_MCA_gds=hash
export OMPI_MCA_btl_tcp_if_include=$NET.0/24
export OMPI_MCA_oob_tcp_if_include=$NET.0/24
ENV
}

wait_idle() {
  local n=$1 t
  for t in $(seq 1 60); do
    [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c -E ' idle$')" = "$n" ] && return 0
    sleep 1
  done
  sinfo -N 2>&1 >&2 || true
  die "the $n nodes did not become idle within 60 s (logs in $STATE/log)"
}

cmd_up() {
  local n=${1:?usage: sim-cluster.sh up N}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 16)) || die "N must be 1 to 16, got $n"
  [ -e "$STATE" ] && die "$STATE exists: the cluster is up (or a down failed); run down first"
  ip link show "$BR" >/dev/null 2>&1 && die "bridge $BR exists without $STATE: run down first"
  need_packages
  local t0=$SECONDS
  mkdir -p "$STATE"/{etc,munge,log,pids,run,spool,ctld,ssh,uts,bin}
  printf '%s\nmade by sim-cluster.sh up %s at %s\n' "$MAGIC" "$n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$STATE/$MARK"
  # Ledger of what existed before, so that down removes only what up made.
  { [ -d /run/netns ] && echo "had /run/netns"; mountpoint -q /run/netns && echo "had /run/netns mount"
    [ -d /run/sshd ] && echo "had /run/sshd"; } >"$STATE/ledger" || true
  { echo sim-ctl; for i in $(seq 1 "$n"); do echo "sim-n$i"; done; } >"$STATE/nodes"

  # network: one bridge, the login node (this host) at .1, the controller at .2, nodes at .11 …
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  ip link set "$BR" up
  mkdir -p /run/sshd
  for node in $(nodes); do
    local ns veth a
    ns=$(ns_of "$node"); veth=$ns; a=$(addr_of "$node")
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "$veth-e"
    ip link set "$veth-e" netns "$ns"
    ip link set "$veth" master "$BR"
    ip link set "$veth" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$veth-e" name eth0
    ip -n "$ns" addr add "$a/24" dev eth0
    ip -n "$ns" link set eth0 up
    touch "$STATE/uts/$node"
    unshare --uts="$STATE/uts/$node" hostname "$node"
    mkdir -p "$STATE/spool/$node" "$STATE/node/$node/tmp" "$STATE/node/$node/shm"
    chmod 1777 "$STATE/node/$node/tmp" "$STATE/node/$node/shm"
    {
      echo "127.0.0.1 localhost"
      echo "$NET.1 sim-login"
      for m in $(nodes); do echo "$(addr_of "$m") $m"; done
    } >"$STATE/node/$node/hosts"
  done

  # munge: a key and a daemon of the cluster's own (own socket)
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chown -R munge:munge "$STATE/munge"
  chmod 755 "$STATE/munge" # slurm daemons (root) and clients reach the socket
  chmod 400 "$STATE/munge/munge.key"
  start_daemon munged - setpriv --reuid=munge --regid=munge --init-groups -- /usr/sbin/munged --foreground --force \
    --key-file="$STATE/munge/munge.key" --socket="$STATE/munge/munge.socket.2" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed"
  for _ in $(seq 1 50); do [ -S "$STATE/munge/munge.socket.2" ] && break; sleep 0.2; done
  munge -S "$STATE/munge/munge.socket.2" -n </dev/null | unmunge -S "$STATE/munge/munge.socket.2" >/dev/null || die "munged does not answer (see $STATE/munge/munged.log)"

  write_slurm_conf "$n"
  write_ssh "$n"
  export SLURM_CONF=$STATE/etc/slurm.conf
  start_daemon slurmctld sim-ctl /usr/sbin/slurmctld -D -i -f "$SLURM_CONF"
  for i in $(seq 1 "$n"); do
    start_daemon "slurmd-sim-n$i" "sim-n$i" /usr/sbin/slurmd -D -N "sim-n$i" -f "$SLURM_CONF"
    start_daemon "sshd-sim-n$i" "sim-n$i" /usr/sbin/sshd -D -e -f "$STATE/ssh/sshd_config" \
      -o "ListenAddress=$(addr_of "sim-n$i")" -o "PidFile=$STATE/run/sshd-sim-n$i.pid"
  done
  wait_idle "$n"

  # a tiny MPI program, for the smoke test (and for anyone debugging the cluster)
  cat >"$STATE/bin/mpi-hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int r, s, v = 1, sum = 0; char h[256];
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &s);
  gethostname(h, sizeof h);
  MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d on %s allreduce %d\n", r, s, h, sum);
  MPI_Finalize(); return sum == s ? 0 : 1;
}
C
  mpicc -O1 -o "$STATE/bin/mpi-hello" "$STATE/bin/mpi-hello.c"
  smoke "$n"
  say "up: $n nodes in $((SECONDS - t0)) s; eval \"\$(bash scripts/dev/sim-cluster.sh env)\" to use it"
}

# Checks that the cluster works: every node answers srun with its own host
# name, an MPI job wires up through srun --mpi=pmix across all nodes, and
# mpirun launches across nodes through sshd. Over TCP on the bridge only.
smoke() {
  local n=$1 out
  eval "$(print_env)"
  out=$(timeout 60 srun -N "$n" -n "$n" hostname | sort -u)
  [ "$(echo "$out" | wc -l)" = "$n" ] || die "srun hostname on $n nodes gave: $out"
  out=$(timeout 60 srun --mpi=pmix --kill-on-bad-exit=1 -N "$n" --ntasks-per-node=2 "$STATE/bin/mpi-hello" | sort)
  echo "$out" | sed 's/^/  srun --mpi=pmix: /' >&2
  [ "$(echo "$out" | grep -c "of $((2 * n)) on .* allreduce $((2 * n))$")" = "$((2 * n))" ] || die "srun --mpi=pmix did not wire up $((2 * n)) ranks"
  [ "$(echo "$out" | awk '{print $6}' | sort -u | wc -l)" = "$n" ] || die "srun --mpi=pmix ranks are not on $n hosts"
  local hosts
  hosts=$(for i in $(seq 1 "$n"); do printf 'sim-n%s:2,' "$i"; done)
  out=$(nsx sim-n1 timeout 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --mca plm rsh --host "${hosts%,}" -n $((2 * n)) "$STATE/bin/mpi-hello" | sort)
  [ "$(echo "$out" | grep -c "allreduce $((2 * n))$")" = "$((2 * n))" ] || die "mpirun over ssh did not run $((2 * n)) ranks: $out"
  [ "$(echo "$out" | awk '{print $6}' | sort -u | wc -l)" = "$n" ] || die "mpirun over ssh: ranks are not on $n hosts"
  say "smoke: srun on $n hosts; srun --mpi=pmix and mpirun (ssh) ran $((2 * n)) MPI ranks over TCP on $n hosts"
}

# A recorded daemon ("PID STARTTIME", as start_daemon wrote it) is alive
# when that pid runs and is still the process started then.
pid_alive() {
  local pid start
  read -r pid start <<<"${1:-}"
  [[ ${pid:-} =~ ^[0-9]+$ ]] && [ -n "${start:-}" ] && kill -0 "$pid" 2>/dev/null && [ "$(proc_start "$pid")" = "$start" ]
}

cmd_status() {
  [ -d "$STATE" ] || { echo "sim-cluster: down (no $STATE)"; return 1; }
  echo "state: $STATE"
  for node in $(nodes); do
    local ns h
    ns=$(ns_of "$node")
    h=$(nsenter --uts="$STATE/uts/$node" hostname 2>/dev/null || echo "?")
    printf '%-8s netns %-10s addr %-12s hostname %-8s processes %s\n' "$node" "$ns" "$(addr_of "$node")" "$h" "$(ip netns pids "$ns" 2>/dev/null | wc -l)"
  done
  for f in "$STATE"/pids/*; do
    [ -e "$f" ] || continue
    printf '%-14s pid %-7s %s\n' "$(basename "$f")" "$(cut -d' ' -f1 "$f")" "$(pid_alive "$(cat "$f")" && echo running || echo gone)"
  done
  SLURM_CONF=$STATE/etc/slurm.conf sinfo -N 2>&1 || true
}

cmd_exec() {
  local node=${1:?usage: sim-cluster.sh exec NODE CMD...}; shift
  [ -f "$STATE/uts/$node" ] || die "no node $node"
  eval "$(print_env)"
  nsx "$node" "$@"
}

# Remove everything `up` made. Robust to a half-made cluster; kills only
# processes it started (recorded pids) or that live in its namespaces.
cmd_down() {
  local t0=$SECONDS
  # only a state directory that up made and marked: SIM_STATE naming anything else (a home, a typo) is left alone
  if [ -e "$STATE" ] || [ -L "$STATE" ]; then
    owned_state || die "$STATE is not a state directory that 'sim-cluster.sh up' made (no $MARK in it): nothing killed, unmounted or removed"
  fi
  if [ -f "$STATE/etc/slurm.conf" ] && [ -f "$STATE/pids/slurmctld" ] && pid_alive "$(cat "$STATE/pids/slurmctld")"; then
    SLURM_CONF=$STATE/etc/slurm.conf scancel --quiet --full --signal=KILL --user=root 2>/dev/null || true
  fi
  # the namespaces' identities, to find any process still in one afterwards
  local ns f pid
  NS_IDS=()
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P-" || true); do
    NS_IDS+=("net:[$(stat -L -c %i "/run/netns/$ns")]")
  done
  if [ -d "$STATE/uts" ]; then
    for f in "$STATE"/uts/*; do
      if [ -e "$f" ] && mountpoint -q "$f"; then NS_IDS+=("uts:[$(stat -L -c %i "$f")]"); fi
    done
  fi
  # daemons by recorded pid (TERM, then KILL)
  daemon_pids() { local g; for g in "$STATE"/pids/*; do if [ -e "$g" ] && pid_alive "$(cat "$g")"; then cut -d' ' -f1 "$g"; fi; done; }
  for pid in $(daemon_pids); do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    [ -z "$(daemon_pids)" ] && break
    sleep 0.2
  done
  for pid in $(daemon_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  # anything still running in the nodes' namespaces (job steps, ranks, ssh sessions)
  for pid in $(ns_pids); do kill -KILL "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 25); do [ -z "$(ns_pids)" ] && break; sleep 0.2; done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P-" || true); do
    ip netns del "$ns" || say "could not delete netns $ns"
  done
  # host ends of the veths go with their peers; the bridge by name
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$P-" || true); do ip link del "$l" 2>/dev/null || true; done
  # UTS namespace files are bind mounts
  if [ -d "$STATE/uts" ]; then
    for f in "$STATE"/uts/*; do [ -e "$f" ] && { umount "$f" 2>/dev/null || true; }; done
  fi
  local ledger=""
  [ -f "$STATE/ledger" ] && ledger=$(cat "$STATE/ledger")
  if [ -f "$STATE/ledger" ]; then
    grep -q "had /run/sshd" <<<"$ledger" || rmdir /run/sshd 2>/dev/null || true
    if [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
      grep -q "had /run/netns mount" <<<"$ledger" || umount /run/netns 2>/dev/null || true
      grep -q "had /run/netns" <<<"$ledger" || rmdir /run/netns 2>/dev/null || true
    fi
  fi
  if owned_state; then rm -rf "$STATE"; fi
  check_clean
  say "down in $((SECONDS - t0)) s: no namespace, link, mount, process or state of the cluster left"
}

# Processes in one of the namespaces recorded in NS_IDS.
NS_IDS=()
ns_pids() {
  ((${#NS_IDS[@]})) || return 0
  local p id
  for p in /proc/[0-9]*; do
    for id in "$(readlink "$p/ns/net" 2>/dev/null)" "$(readlink "$p/ns/uts" 2>/dev/null)"; do
      if [ -n "$id" ] && printf '%s\n' "${NS_IDS[@]}" | grep -qxF "$id"; then echo "${p#/proc/}"; break; fi
    done
  done
}

# Fails if anything of the cluster is left.
check_clean() {
  local left=()
  ip netns list 2>/dev/null | grep -q "^$P-" && left+=("network namespaces: $(ip netns list | grep "^$P-" | tr '\n' ' ')")
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -q "^$P-" && left+=("links: $(ip -o link show | awk -F': ' '{print $2}' | grep "^$P-" | tr '\n' ' ')")
  grep -q -e "$STATE" -e "/run/netns/$P-" /proc/self/mountinfo && left+=("mounts: $(grep -e "$STATE" -e "/run/netns/$P-" /proc/self/mountinfo | awk '{print $5}' | tr '\n' ' ')")
  [ -e "$STATE" ] && left+=("state directory $STATE")
  # processes: any in the cluster's namespaces (known when down recorded them), or naming its state directory
  local p stray=()
  stray=($(ns_pids))
  for p in /proc/[0-9]*; do
    case "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" in
      *sim-cluster*.sh*) ;; # this script and its callers name the state directory in their arguments
      *"$STATE"*) stray+=("${p#/proc/}") ;;
    esac
  done
  ((${#stray[@]})) && left+=("processes: ${stray[*]}")
  if ((${#left[@]})); then
    printf 'sim-cluster: left behind: %s\n' "${left[@]}" >&2
    return 1
  fi
}

case ${1:-} in
  up) cmd_up "${2:-}" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) print_env ;;
  exec) shift; cmd_exec "$@" ;;
  exec-raw) shift; node=$1; shift; NSX_EXEC=exec nsx "$node" "$@" ;; # for start_daemon: no environment added
  check-clean) check_clean && say "nothing of the cluster is left" ;;
  *) die "usage: sim-cluster.sh up N | down | status | env | exec NODE CMD... | check-clean" ;;
esac
