#!/usr/bin/env bash
# Outbound benchmark: sends queued, DKIM-signed (Ed25519 + RSA) and delivered
# by `mailctl serve` to Postfix's smtp-sink, against a private Postfix
# instance relaying the same number of messages to the same sink in the same
# run. Needs root (a private Postfix instance) and Debian's postfix package.
#
#   sudo bench/outbound.sh                 # measure and rewrite the outbound section of docs/benchmarks.md
#   sudo bench/outbound.sh --no-write      # measure and print only
#
# Knobs (environment): MSGS=1000 SESSIONS=8 BODY=2048 REPS=3 WARM=200 SETTLE=61 (seconds
# between measurements, see settle); BENCH_DIR=/var/tmp (where the files go); BENCH_FS=ext4
# (the files go on a file system of that type made for the run, see bench/lib.sh); KEEP=1
# leaves the work directory (logs, Postfix's maillog) in place.
set -euo pipefail

MSGS=${MSGS:-1000}
SESSIONS=${SESSIONS:-8}
BODY=${BODY:-2048}
REPS=${REPS:-3}
WRITE=1
[[ ${1:-} == --no-write ]] && WRITE=0

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
DOC=$ROOT/docs/benchmarks.md

die() { echo "bench: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root for a private Postfix instance: sudo bench/outbound.sh"
for tool in smtp-sink smtp-source postfix postconf go python3; do
	command -v "$tool" >/dev/null || die "$tool not found (apt install postfix; Go 1.26)"
done

bench_fs obench
chmod 755 "$WORK"
SINK_PID=""
cleanup() {
	set +e
	trap '' HUP INT TERM # a second signal does not cut the cleanup short
	stop_tracked
	[[ -f $WORK/postfix/etc/main.cf ]] && postfix -c "$WORK/postfix/etc" stop >/dev/null 2>&1
	sleep 0.5
	if [[ ${KEEP:-0} == 1 ]]; then echo "bench: kept $WORK" >&2; else bench_fs_cleanup; fi
}
trap cleanup EXIT
# A runner aborting the run signals it: stop what it started then too, and
# exit as the signal would (128+signo). Bash runs the EXIT trap on SIGTERM
# and SIGHUP by itself, but sent SIGINT alone it carries on unless the
# command in the foreground died of it too.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

echo "bench: building mailctl, dnstestd and sendload" >&2
(cd "$ROOT" && go build -o "$WORK/mailctl" ./cmd/mailctl &&
	go build -o "$WORK/dnstestd" ./internal/dnstest/cmd/dnstestd &&
	go build -o "$WORK/sendload" ./bench/sendload)

# One sink port for the whole run; a fresh smtp-sink per measurement so that
# its counter starts at zero. Its greeting name differs from Postfix's
# myhostname, or Postfix would refuse to deliver to "itself".
SINK_PORT=$(free_port)
start_sink() {
	smtp-sink -u nobody -c -h sink.bench.test "127.0.0.1:$SINK_PORT" 1000 >"$WORK/sink.out" 2>&1 &
	SINK_PID=$!
	track "$SINK_PID"
	for _ in $(seq 50); do
		python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$SINK_PORT),1).close()" 2>/dev/null && return
		sleep 0.1
	done
	die "smtp-sink did not start"
}
stop_sink() { kill "$SINK_PID" 2>/dev/null || true; wait "$SINK_PID" 2>/dev/null || true; SINK_PID=""; }
sunk() { tr '\r' '\n' <"$WORK/sink.out" | awk -F'mesg=' 'NF > 1 { n = $2 } END { print n + 0 }'; }
# wait_sunk N: poll until the sink has N messages; prints the time it had.
wait_sunk() {
	local n=0
	for _ in $(seq ${WAIT_POLLS:-6000}); do
		n=$(sunk)
		[[ $n -ge $1 ]] && { now; return; }
		sleep 0.02
	done
	die "the sink received $n of $1 messages"
}

# DNS: the recipient domain's MX is a host on loopback, where the sink listens.
DNS_PORT=$(free_port)
cat >"$WORK/zone.txt" <<EOF
sink.example MX 10 mx.sink.example
mx.sink.example A 127.0.0.1
EOF
"$WORK/dnstestd" -listen "127.0.0.1:$DNS_PORT" -zone "$WORK/zone.txt" >/dev/null 2>&1 &
track $!
RCPT=agent@sink.example

# run_mailctl REP: a fresh daemon with fresh Ed25519 and RSA keys; sendload
# submits MSGS sends from SESSIONS connections; timed from the first send to
# the last message at the sink. Prints: queued/s delivered/s cpu-ms/msg VmHWM-KiB size.
run_mailctl() {
	local dir=$WORK/mailctl-$1
	mkdir -p "$dir"
	cat >"$dir/config.toml" <<EOF
hostname = "mx.bench.example"
domains = ["bench.example"]
[paths]
state_dir = "$dir/state"
socket = "$dir/mailctl.sock"
dkim_dir = "$dir/dkim"
[smtp]
listen = ["127.0.0.1:$(free_port)"]
[trust]
resolver = "127.0.0.1:$DNS_PORT"
[send]
per_minute = 1000000
per_hour = 1000000
per_day = 1000000
[delivery]
port = $SINK_PORT
[[mailboxes]]
name = "bench"
owner = "root"
EOF
	"$WORK/mailctl" dkim keygen --config "$dir/config.toml" --selector bench-ed --algorithm ed25519 >/dev/null
	"$WORK/mailctl" dkim keygen --config "$dir/config.toml" --selector bench-rsa --algorithm rsa >/dev/null
	profile_args
	"$WORK/mailctl" serve --config "$dir/config.toml" "${PROFILE_ARGS[@]}" >"$dir/log" 2>&1 &
	local pid=$!
	track "$pid"
	for _ in $(seq 100); do
		grep -q "inbound listeners up" "$dir/log" && [[ -S $dir/mailctl.sock ]] && break
		sleep 0.1
	done
	start_sink
	# The profiling pass (not timed) attaches perf or strace to the daemon.
	local probe=""
	case ${PROBE:-} in
	perf) perf record -F 999 -g -p "$pid" -o "$WORK/perf.data" >/dev/null 2>&1 & probe=$! ;;
	strace) strace -f -c -o "$WORK/strace-mailctl.txt" -p "$pid" 2>/dev/null & probe=$! ;;
	esac
	[[ -n $probe ]] && sleep 1
	local c0 c1 t2 out
	c0=$(cpu_ticks "$pid")
	out=$("$WORK/sendload" -socket "$dir/mailctl.sock" -mailbox bench -to "$RCPT" -n "$MSGS" -c "$SESSIONS" -body "$BODY") ||
		die "sendload failed (log: $dir/log)"
	t2=$(wait_sunk "$MSGS")
	sleep 0.5 # the daemon records the delivery after the sink's 250
	c1=$(cpu_ticks "$pid")
	if [[ -n $probe ]]; then
		kill -INT "$probe"
		wait "$probe" 2>/dev/null || true
	fi
	local hwm t0 t1 size
	hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
	t0=$(sed -n 's/^start=//p' <<<"$out")
	t1=$(sed -n 's/^queued=//p' <<<"$out")
	size=$(sed -n 's/^size=//p' <<<"$out")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	stop_sink
	[[ $(sunk) -eq $MSGS ]] || die "the sink has $(sunk) messages, expected $MSGS"
	awk -v n="$MSGS" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v c="$((c1 - c0))" -v tck="$TCK" -v hwm="$hwm" -v size="$size" \
		'BEGIN { printf "%.1f %.1f %.3f %d %d\n", n / (t1 - t0), n / (t2 - t0), c / tck * 1000 / n, hwm, size }'
	# The files stay until the whole run ends (see settle).
}

# The private Postfix: own config, queue and data directories, smtpd on a
# loopback port, everything relayed to the sink. Stock settings otherwise.
PF=$WORK/postfix
PF_PORT=$(free_port)
start_postfix "$PF" "$PF_PORT" mx.pf.bench.example pf.bench.example <<EOF
mydestination =
relayhost = [127.0.0.1]:$SINK_PORT
EOF

# run_postfix LEN: smtp-source submits, Postfix relays to the sink. Prints:
# accepted/s delivered/s cpu-ms/msg.
run_postfix() {
	local master
	master=$(awk '{print $1}' "$PF/spool/pid/master.pid")
	start_sink
	local probe=""
	if [[ ${PROBE:-} == strace ]]; then
		# Every process of the master's tree, and workers forked meanwhile.
		local tree
		mapfile -t tree < <({ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$master" '
			{ ppid[$1] = $4 } END { want[root] = 1; changed = 1
				while (changed) { changed = 0; for (p in ppid) if (!(p in want) && (ppid[p] in want)) { want[p] = 1; changed = 1 } }
				for (p in want) print p }')
		strace -f -c -o "$WORK/strace-postfix.txt" $(printf -- '-p %s ' "${tree[@]}") 2>/dev/null &
		probe=$!
		sleep 1
	fi
	local c0 t0 t1 t2 c1
	c0=$(cpu_ticks "$master")
	t0=$(now)
	smtp-source -s "$SESSIONS" -m "$MSGS" -l "$1" -f bench@pf.bench.example -t "$RCPT" "127.0.0.1:$PF_PORT"
	t1=$(now)
	t2=$(wait_sunk "$MSGS")
	sleep 0.5 # qmgr removes the queue file after the 250
	c1=$(cpu_ticks "$master")
	if [[ -n $probe ]]; then
		kill -INT "$probe"
		wait "$probe" 2>/dev/null || true
	fi
	stop_sink
	awk -v n="$MSGS" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v c="$((c1 - c0))" -v tck="$TCK" \
		'BEGIN { printf "%.1f %.1f %.3f\n", n / (t1 - t0), n / (t2 - t0), c / tck * 1000 / n }'
}

# pf_tune stock|tuned: "tuned" lifts smtpd's in_flow_delay pause, which
# throttles submission whenever the queue manager lags behind.
pf_tune() {
	if [[ $1 == tuned ]]; then
		postconf -c "$PF/etc" -e in_flow_delay=0s
	else
		postconf -c "$PF/etc" -e in_flow_delay=1s
	fi
	postfix -c "$PF/etc" reload >/dev/null 2>&1
	sleep 1
}

# Warm-up (page cache); the mailctl pass also tells the size of its messages
# on the wire, which smtp-source then sends to Postfix.
echo "bench: warm-up" >&2
MSGS_SAVED=$MSGS
WARM=${WARM:-200}
MSGS=$WARM
LEN=$(run_mailctl warm | awk '{ print $5 }')
[[ $LEN -gt 0 ]] || die "no message size from the warm-up"
MSGS=$MSGS_SAVED

: >"$WORK/mailctl.txt"
: >"$WORK/postfix.txt"
: >"$WORK/tuned.txt"
# settle: an ext4 without a journal does not reuse an inode for 60 s after
# it is freed, or 360 s while its inode table block is dirty (as it is
# while files are being created beside it), and its search for a free inode
# reads past each such one, which slows every file created meanwhile. So
# that no measurement pays for the deletions of another server, every
# mailctl measurement comes before Postfix's first (Postfix deletes its
# queue files as it delivers; mailctl deletes nothing, and its files stay
# until the whole run ends), and every measurement starts SETTLE seconds
# after the one before, synced.
settle() { sync; sleep "${SETTLE:-61}"; }
for rep in $(seq "$REPS"); do
	settle
	echo "bench: run $rep/$REPS mailctl" >&2
	run_mailctl "$rep" >>"$WORK/mailctl.txt"
	tail -n1 "$WORK/mailctl.txt" >&2
done
if [[ ${POSTFIX:-1} == 1 ]]; then
	# Postfix's warm-up (its long-running services), after every mailctl
	# measurement for the reason above.
	MSGS=$WARM
	pf_tune stock
	run_postfix "$LEN" >/dev/null
	MSGS=$MSGS_SAVED
	for rep in $(seq "$REPS"); do
		pf_tune stock
		settle
		echo "bench: run $rep/$REPS postfix (stock)" >&2
		run_postfix "$LEN" >>"$WORK/postfix.txt"
		tail -n1 "$WORK/postfix.txt" >&2
		pf_tune tuned
		settle
		echo "bench: run $rep/$REPS postfix (in_flow_delay = 0s)" >&2
		run_postfix "$LEN" >>"$WORK/tuned.txt"
		tail -n1 "$WORK/tuned.txt" >&2
	done
fi

# Where mailctl's time goes: separate, untimed passes of PROBE_MSGS messages,
# one under strace -c (system calls per message, mailctl and Postfix) and
# one under perf record (share of the daemon's CPU samples per function).
PROBE_MSGS=${PROBE_MSGS:-500}
TRACE_OUT=""
PERF_OUT=""
MSGS_SAVED=$MSGS
MSGS=$PROBE_MSGS
# The perf pass first: it is mailctl alone, before the strace pass has
# Postfix delete files.
if [[ ${PERF:-1} == 1 ]] && command -v perf >/dev/null; then
	echo "bench: perf pass" >&2
	PROBE=perf run_mailctl perf >/dev/null
	# Inclusive shares: a sample in a signature inside a queue save counts
	# for both, so the rows overlap and do not add up to 100%.
	PERF_OUT=$(perf report -i "$WORK/perf.data" --children --sort symbol --stdio -g none 2>/dev/null |
		awk '
			BEGIN {
				n = split("dkim.NewSigner.func2|DKIM signing, both signatures, body hash included;compose.Build|composing the message;store.(*Dir).writeNewFileTo|creating files (unnamed, then linked whole);syscall.Fsync|fsync;unix.Syncfs|syncfs;queue.(*journal).put|queue state records;queue.(*Queue).Enqueue|enqueueing (journal record and its group fsync);store.(*Store).createUnsynced|sent-folder copy, written once;store.(*Store).UpdateUnsynced|sent-folder status updates (the first writes the copy held since the answer);queue.(*Queue).checkpoint|checkpoints (syncfs, then the settled items dropped);remote.(*Client).Deliver|SMTP delivery to the sink;runtime.gcBgMarkWorker|garbage collector", rows, ";")
				for (i = 1; i <= n; i++) { split(rows[i], kv, "|"); key[i] = kv[1]; label[i] = kv[2] }
			}
			/^ +[0-9.]+%/ { for (i = 1; i <= n; i++) if (index($0, key[i] " ") || substr($0, length($0) - length(key[i]) + 1) == key[i]) if (!(i in got)) got[i] = $1 }
			END { for (i = 1; i <= n; i++) printf "| %s (`%s`) | %s |\n", label[i], key[i], (i in got) ? got[i] : "0%" }')
fi
if [[ ${STRACE:-1} == 1 ]] && command -v strace >/dev/null; then
	echo "bench: strace pass" >&2
	PROBE=strace run_mailctl strace >/dev/null
	pf_tune stock
	PROBE=strace run_postfix "$LEN" >/dev/null
	calls() { awk '$NF ~ /^(fsync|fdatasync|syncfs|renameat2?|rename|link|linkat|unlink|unlinkat|openat|connect|sendto|write|writev|read|getrandom)$/ && $4 ~ /^[0-9]+$/ { print $NF, $4 }' "$1"; }
	TRACE_OUT=$(join -a1 -a2 -e 0 -o 0,1.2,2.2 <(calls "$WORK/strace-mailctl.txt" | sort) <(calls "$WORK/strace-postfix.txt" | sort) |
		awk -v n="$PROBE_MSGS" '{ printf "| `%s` | %.2f | %.2f |\n", $1, $2 / n, $3 / n }')
fi
MSGS=$MSGS_SAVED

spread() {
	sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%s (%s–%s)", m, v[1], v[NR] }'
}
median() { sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", a / b }'; }

M_DEL=$(median "$WORK/mailctl.txt" 2)
M_CPU=$(median "$WORK/mailctl.txt" 3)
HWM=$(sort -g -k4,4 "$WORK/mailctl.txt" | awk '{ v[NR] = $4 } END { printf "%.1f MiB (%.1f–%.1f)", v[int((NR + 1) / 2)] / 1024, v[1] / 1024, v[NR] / 1024 }')
rows() { # rows FILE LABEL
	printf '| %s | %s | %s | %s | %s | %s |\n' "$2" "$(spread "$1" 1)" "$(spread "$1" 2)" "$(spread "$1" 3)" \
		"$(ratio "$M_DEL" "$(median "$1" 2)")" "$(ratio "$M_CPU" "$(median "$1" 3)")"
}

MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
FS=$(df -T "$WORK" | awk 'NR == 2 { print $2 }')
# An ext4 without a journal shows in the profile; it changes the cost of
# creating and fsyncing files, which is most of the work here.
if [[ -f $WORK/perf.data ]] && perf report -i "$WORK/perf.data" --children --sort symbol --stdio -g none 2>/dev/null | grep ext4_fsync_nojournal >/dev/null; then
	FS="$FS without a journal"
fi
SECTION=$(
	cat <<EOF
<!-- outbound:begin -->
## Outbound: mailctl vs Postfix

Measured by \`sudo bench/outbound.sh\` on $(date -u +%Y-%m-%d): $MSGS messages of $LEN bytes to one
remote recipient, delivered to Postfix's \`smtp-sink\` on loopback, $SESSIONS concurrent submitters,
$REPS runs each (after a $WARM-message warm-up), median and (min–max), each measurement ${SETTLE:-61} s after the
one before, synced; every mailctl measurement comes before Postfix's first, and mailctl's files are kept until the whole run ends, so that no measurement pays for the other server's deletions (see settle). $(bench_fs_line)

| sender | queued msg/s (submission answered) | delivered msg/s (all at the sink) | CPU ms per message | mailctl delivered rate ÷ this | mailctl CPU ÷ this |
| --- | --- | --- | --- | --- | --- |
| mailctl serve, Ed25519 + RSA DKIM (Go's crypto/ed25519 and crypto/rsa) | $(spread "$WORK/mailctl.txt" 1) | $(spread "$WORK/mailctl.txt" 2) | $(spread "$WORK/mailctl.txt" 3) | 1.00× | 1.00× |
$(rows "$WORK/postfix.txt" "Postfix relayhost → sink, stock settings, no signing")
$(rows "$WORK/tuned.txt" "Postfix relayhost → sink, \`in_flow_delay = 0s\`, no signing")

mailctl's peak RSS (VmHWM, per run, fresh daemon): $HWM.

- mailctl: \`mailctl serve\` with a fresh Ed25519 and a fresh RSA-2048 key (\`mailctl dkim keygen\`), both
  signatures made in Go (docs/dkim.md),
  send limits raised (\`[send] per_minute/per_hour/per_day = 1000000\`; the defaults are 20/200/1000),
  \`[delivery] port\` = the sink's port (its other limits as shipped: 8 attempts at once, at most 4 to one domain), MX lookups answered by a local DNS server
  (\`internal/dnstest/cmd/dnstestd\`: MX → a host with A 127.0.0.1). \`bench/sendload\` opens
  $SESSIONS control-socket connections and sends $MSGS \`send\` requests (${BODY}-byte body,
  \`wait_ms: 1\`); each answer means the message is composed, signed twice and durably queued,
  and its sent copy is readable through the daemon (on disk once the first attempt ends, at most 1 s later). Delivered is timed from the first send until the sink counted the
  last message. CPU is the daemon's utime+stime from \`/proc/PID/stat\`, read 0.5 s after the
  last message reached the sink; the client's and the DNS server's CPU are not counted.
- Postfix $(postconf -c "$PF/etc" -h mail_version): a private instance (own config, queue and data
  directories), \`relayhost = [127.0.0.1]:port-of-the-sink\`, \`smtpd\` on a loopback port,
  load from \`smtp-source -s $SESSIONS -m $MSGS -l $LEN\` (the size mailctl reports for its composed and signed messages), no DKIM signing.
  Queued is the smtp-source wall time; delivered runs until the sink counted every
  message. CPU is utime+stime(+cutime+cstime) over the master's process tree, same 0.5 s.
- The sink: \`smtp-sink -c\`, a fresh one on the same port for every measurement.
- Machine: $(nproc) CPUs ($MODEL), $MEM RAM, Linux $(uname -r), $FS, $(go version | awk '{print $3}').
  The machine was shared with other work while measuring; compare rows of the same run.

Reproduce (as root, Debian with \`postfix\` and, for the tables below, \`strace\` and \`perf\` installed; Go as in go.mod; from the repository root):

\`\`\`
sudo bench/outbound.sh                # rewrites this section
sudo bench/outbound.sh --no-write     # prints it only
sudo MSGS=1000 SESSIONS=8 BODY=2048 REPS=3 bench/outbound.sh
\`\`\`

$(if [[ -n $TRACE_OUT ]]; then
		printf 'System calls per message (a separate pass of %s messages each under `strace -f -c`, not timed; Postfix with stock settings, its whole process tree, counted until the sink has every message):\n\n| syscall | mailctl serve | Postfix relay |\n| --- | --- | --- |\n%s\n' "$PROBE_MSGS" "$TRACE_OUT"
	fi)

$(if [[ -n $PERF_OUT ]]; then
		printf "Where mailctl's CPU goes (another untimed pass of %s messages under \`perf record -F 999 -g\`; share of the daemon's samples spent in or under each function, so rows overlap):\n\n| work | share of samples |\n| --- | --- |\n%s\n" "$PROBE_MSGS" "$PERF_OUT"
	fi)
<!-- outbound:end -->
EOF
)

if [[ $WRITE == 0 ]]; then
	printf '%s\n' "$SECTION"
	exit 0
fi
write_section outbound "$DOC" "$SECTION"
