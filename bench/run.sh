#!/usr/bin/env bash
# Inbound benchmark: Postfix's smtp-source against mailctl serve (all checks
# on: SPF, DKIM, DMARC against a local DNS server; every 250 durable) and, in
# the same run, against a private Postfix instance delivering to a Maildir on
# the same machine. Needs root (a private Postfix and a throwaway user) and
# Debian's postfix package.
#
#   sudo bench/run.sh                 # measure and rewrite the inbound section of docs/benchmarks.md
#   sudo bench/run.sh --no-write      # measure and print only
#
# Every load is measured in two variants, so that no number depends on what
# the file system went through just before (see settle):
#   kept     the files of every measurement stay until the whole run ends,
#            no file is deleted before the last kept measurement ends, and
#            each measurement starts SETTLE s after the one before, synced;
#   deleted  the files of the measurement before are deleted just before each
#            measurement, as a server that purges or expires mail does.
# All kept measurements come first, then all deleted ones; within each the
# loads, runs and servers are interleaved.
#
# Knobs (environment): CASES="8x4096 32x4096 8x102400 8x1048576" (sessions x
# message bytes) MSGS=2000 MSGS_100K=500 MSGS_1M=100 (messages per run for
# bodies over 8 KiB and over 200 KiB) REPS=3 VARIANTS="kept deleted"
# GOBENCH=1 BIG=26214400 (the message whose peak RSS is measured; 0 skips it)
# SETTLE=61 (seconds before a kept measurement) BENCH_DIR=/var/tmp (where the
# files go) BENCH_FS=ext4 (the files go on a file system of that type made for
# the run, see bench/lib.sh) KEEP=1 (leave the work directory in place)
set -euo pipefail

CASES=${CASES:-8x4096 32x4096 8x102400 8x1048576}
VARIANTS=${VARIANTS:-kept deleted}
MSGS=${MSGS:-2000}
REPS=${REPS:-3}
SESSIONS=${CASES%%x*}
LEN=${CASES%% *}
LEN=${LEN#*x}
BIG=${BIG:-26214400}
GOBENCH=${GOBENCH:-1}
WRITE=1
[[ ${1:-} == --no-write ]] && WRITE=0

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
DOC=$ROOT/docs/benchmarks.md

die() { echo "bench: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root for a private Postfix instance and a throwaway user: sudo bench/run.sh"
for tool in smtp-source postfix postconf go useradd; do
	command -v "$tool" >/dev/null || die "$tool not found (apt install postfix; Go 1.26)"
done

bench_fs bench
chmod 755 "$WORK"
USER_NAME=mcbench$(printf '%04x' $((RANDOM)))
cleanup() {
	set +e
	trap '' HUP INT TERM # a second signal does not cut the cleanup short
	stop_tracked
	[[ -f $WORK/postfix/etc/main.cf ]] && postfix -c "$WORK/postfix/etc" stop >/dev/null 2>&1
	sleep 0.5
	userdel "$USER_NAME" >/dev/null 2>&1
	[[ ${KEEP:-0} == 1 ]] || bench_fs_cleanup
}
trap cleanup EXIT
# A runner aborting the run signals it: stop what it started then too, and
# exit as the signal would (128+signo). Bash runs the EXIT trap on SIGTERM
# and SIGHUP by itself, but sent SIGINT alone it carries on unless the
# command in the foreground died of it too.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

echo "bench: building mailctl and dnstestd" >&2
(cd "$ROOT" && go build -o "$WORK/mailctl" ./cmd/mailctl && go build -o "$WORK/dnstestd" ./internal/dnstest/cmd/dnstestd)

mkdir -p "$WORK/home"
useradd -M -U -d "$WORK/home" -s /usr/sbin/nologin "$USER_NAME"
chown "$USER_NAME:" "$WORK/home"

# DNS for the sender domain: SPF passes for loopback, DMARC is published, so
# every message costs the daemon an SPF, a DMARC and a DKIM evaluation.
DNS_PORT=$(free_port)
cat >"$WORK/zone.txt" <<EOF
bench.example TXT "v=spf1 ip4:127.0.0.1 -all"
_dmarc.bench.example TXT "v=DMARC1; p=none"
EOF
"$WORK/dnstestd" -listen "127.0.0.1:$DNS_PORT" -zone "$WORK/zone.txt" >/dev/null 2>&1 &
track $!

# msgs_for LEN: how many messages a run sends, fewer for larger bodies.
msgs_for() {
	if (($1 <= 8192)); then echo "$MSGS"; elif (($1 <= 204800)); then echo "${MSGS_100K:-500}"; else echo "${MSGS_1M:-100}"; fi
}
# source_cmd: smtp-source with the load of this measurement.
source_cmd() { SMTP_SOURCE=(smtp-source -s "$SESSIONS" -m "$MSGS" -l "$LEN" -f from@bench.example); }
source_cmd

# mailctl_config DIR PORT [MAX_MESSAGE_BYTES [METRICS_PORT]]: the daemon's
# configuration.
mailctl_config() {
	local dir=$1 port=$2
	cat >"$dir/config.toml" <<EOF
hostname = "mx.bench.test"
domains = ["bench.test"]
[paths]
state_dir = "$dir/state"
socket = "$dir/mailctl.sock"
dkim_dir = "$dir/dkim"
[smtp]
listen = ["127.0.0.1:$port"]
max_connections_per_ip = 100
max_message_bytes = ${3:-26214400}
[trust]
resolver = "127.0.0.1:$DNS_PORT"
trusted_senders = ["*@bench.example"]
[[mailboxes]]
name = "$USER_NAME"
owner = "$USER_NAME"
EOF
	if [[ -n ${4:-} ]]; then
		printf '[metrics]\nlisten = "127.0.0.1:%s"\n' "$4" >>"$dir/config.toml"
	fi
}

# journal_fsyncs PORT: the daemon's inbound journal fsyncs so far (metrics).
journal_fsyncs() {
	python3 -c 'import sys, urllib.request
for line in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode().splitlines():
    if line.startswith("mailctl_inbound_journal_fsyncs_total "): print(int(float(line.split()[1])))' "$1"
}

# run_mailctl DIR: start a fresh daemon with its files in DIR, send, record
# rate, CPU, VmHWM and the journal's fsyncs per message.
run_mailctl() {
	local dir=$1 port mport
	port=$(free_port)
	mport=$(free_port)
	mkdir -p "$dir"
	mailctl_config "$dir" "$port" 26214400 "$mport"
	profile_args
	"$WORK/mailctl" serve --config "$dir/config.toml" "${PROFILE_ARGS[@]}" >"$dir/log" 2>&1 &
	local pid=$!
	track "$pid"
	for _ in $(seq 100); do
		grep -q "inbound listeners up" "$dir/log" && break
		sleep 0.1
	done
	local c0 t0 t1 c1 f0 f1
	f0=$(journal_fsyncs "$mport")
	c0=$(cpu_ticks "$pid")
	t0=$(now)
	"${SMTP_SOURCE[@]}" -t "$USER_NAME@bench.test" "127.0.0.1:$port"
	t1=$(now)
	# CPU is read once the last checkpoint has synced the files and emptied
	# the journal (its segments back to their magic line), so that it counts.
	for _ in $(seq 100); do
		[[ -z $(find "$dir/state/inbound" -maxdepth 1 -name 'journal.*' -size +64c) ]] && break
		sleep 0.05
	done
	c1=$(cpu_ticks "$pid")
	f1=$(journal_fsyncs "$mport")
	local hwm stored
	hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
	stored=$(find "$dir/state/mailboxes/$USER_NAME/inbox" -name '*.md' | wc -l)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	[[ $stored == "$MSGS" ]] || die "mailctl stored $stored of $MSGS messages (log: $dir/log)"
	awk -v n="$MSGS" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v tck="$TCK" -v hwm="$hwm" -v f="$((f1 - f0))" \
		'BEGIN { printf "%.1f %.1f %.3f %d %.3f\n", n / (t1 - t0), n / (t1 - t0), c / tck * 1000 / n, hwm, f / n }'
}

# The private Postfix: its own config, queue and data directories, smtpd on
# a loopback high port only, local delivery to ~/Maildir/ of the throwaway
# user. Stock settings otherwise.
PF=$WORK/postfix
PF_PORT=$(free_port)
start_postfix "$PF" "$PF_PORT" mx.bench.test bench.test <<EOF
mydestination = bench.test
home_mailbox = Maildir/
EOF

# settle: an ext4 without a journal does not reuse an inode for 60 s after
# it is freed, or 360 s while its inode table block is dirty, and its search
# for a free inode reads past each such one, which slows every file created
# meanwhile. A kept measurement pays for no one's deletions (as far as this
# script decides): it starts SETTLE seconds after the one before, synced,
# and the files of every kept measurement stay until the whole run ends.
settle() { sync; sleep "${SETTLE:-61}"; }

# PREV is what the last deleted-variant measurement left (its mailctl state
# directory or Postfix's Maildir): the next one deletes it just before it
# starts, as a server that purges or expires mail deletes what came before.
PREV=""
delete_prev() {
	[[ -n $PREV ]] && rm -rf "$PREV"
	PREV=""
}

# maildir_aside DIR: the Maildir of the run just measured goes to DIR (a
# rename, nothing is deleted), so the next delivery starts empty.
maildir_aside() {
	[[ -d $WORK/home/Maildir ]] || return 0
	mv "$WORK/home/Maildir" "$1"
}

# run_postfix: send, then wait until every message is in the Maildir.
run_postfix() {
	local master maildir=$WORK/home/Maildir/new
	master=$(awk '{print $1}' "$PF/spool/pid/master.pid")
	local c0 t0 t1 t2 c1 n=0
	c0=$(cpu_ticks "$master")
	t0=$(now)
	"${SMTP_SOURCE[@]}" -t "$USER_NAME@bench.test" "127.0.0.1:$PF_PORT"
	t1=$(now)
	for _ in $(seq 1200); do
		n=$(find "$maildir" -type f 2>/dev/null | wc -l)
		[[ $n -ge $MSGS ]] && break
		sleep 0.05
	done
	t2=$(now)
	[[ $n == "$MSGS" ]] || die "Postfix delivered $n of $MSGS messages (log: $PF/maillog)"
	c1=$(cpu_ticks "$master")
	awk -v n="$MSGS" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v c="$((c1 - c0))" -v tck="$TCK" \
		'BEGIN { printf "%.1f %.1f %.3f -\n", n / (t1 - t0), n / (t2 - t0), c / tck * 1000 / n }'
}

# Warm up both once (page cache, Postfix's long-running services).
echo "bench: warm-up" >&2
MSGS_SAVED=$MSGS
MSGS=200
source_cmd
run_mailctl "$WORK/warm" >/dev/null
run_postfix >/dev/null
maildir_aside "$WORK/warm-maildir"
MSGS=$MSGS_SAVED

# pf_tune stock|tuned: Postfix's defaults throttle this workload twice: smtpd
# pauses up to in_flow_delay (1s) when arrivals outpace deliveries, and
# local delivery to one recipient runs at most 2 at a time. "tuned" lifts
# both so that Postfix is measured at its best too.
pf_tune() {
	if [[ $1 == tuned ]]; then
		postconf -c "$PF/etc" -e in_flow_delay=0s local_destination_concurrency_limit=$SESSIONS
	else
		postconf -c "$PF/etc" -e in_flow_delay=1s local_destination_concurrency_limit=2
	fi
	postfix -c "$PF/etc" reload >/dev/null 2>&1
	sleep 1
}

# measure SERVER VARIANT CASE REP: one measurement, its line appended to
# $WORK/SERVER-VARIANT-CASE.txt. SERVER is mailctl, stock or tuned (Postfix).
measure() {
	local server=$1 variant=$2 c=$3 rep=$4 out=$WORK/$1-$2-$3.txt dir
	if [[ $server != mailctl ]]; then
		pf_tune "$server"
	fi
	if [[ $variant == kept ]]; then
		settle
	else
		delete_prev
	fi
	echo "bench: $c, $variant, run $rep/$REPS, $server" >&2
	dir=$WORK/$variant/$server-$c-$rep
	if [[ $server == mailctl ]]; then
		run_mailctl "$dir" >>"$out"
	else
		run_postfix >>"$out"
		maildir_aside "$dir"
	fi
	[[ $variant == deleted ]] && PREV=$dir
	tail -n1 "$out" >&2
}

mkdir -p "$WORK/kept" "$WORK/deleted"
# Every kept measurement comes before any deleted one, so that no file is
# deleted in this run until the last kept measurement has ended; within a
# variant the runs of each load and the servers are interleaved. The first
# deleted measurement deletes the warm-up's files, as each later one deletes
# the files of the one before.
for variant in $VARIANTS; do
	[[ $variant == deleted ]] && PREV=$WORK/warm
	for rep in $(seq "$REPS"); do
		for c in $CASES; do
			SESSIONS=${c%%x*}
			LEN=${c#*x}
			MSGS_SAVED=$MSGS
			MSGS=$(msgs_for "$LEN")
			source_cmd
			for server in mailctl stock tuned; do
				measure "$server" "$variant" "$c" "$rep"
			done
			MSGS=$MSGS_SAVED
		done
	done
done
delete_prev
SESSIONS=${CASES%%x*}
LEN=${CASES%% *}
LEN=${LEN#*x}
MSGS=$(msgs_for "$LEN")
source_cmd

# One message of about BIG bytes to a fresh daemon: its peak RSS (VmHWM)
# against the message's size, and the RSS at rest before it. Three messages:
# plain text without a declared size (smtp-source), plain text with one, and
# a multipart message whose attachment is most of it (Python's smtplib,
# which declares the size with MAIL FROM SIZE= as MTAs do).
BIG_OUT=""
if ((BIG > 0)); then
	echo "bench: one message of $BIG bytes, three ways" >&2
	# The messages, written once: plain text, and text with an attachment
	# of random bytes whose base64 brings the message to BIG.
	/usr/bin/python3 - "$BIG" "$WORK/big-plain.eml" "$WORK/big-attachment.eml" <<'PY'
import os, sys
from email import policy
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
big = int(sys.argv[1])
with open(sys.argv[2], "wb") as f:
    f.write(b"From: from@bench.example\r\nSubject: big\r\n\r\n" + (b"x" * 74 + b"\r\n") * ((big - 64) // 76))
m = MIMEMultipart()
m["From"], m["Subject"] = "from@bench.example", "big, with an attachment"
m.attach(MIMEText("The attachment is most of this message.\n"))
att = MIMEApplication(os.urandom(int((big - 4096) / 1.37)), Name="big.bin")  # base64 in 76-character lines
att["Content-Disposition"] = 'attachment; filename="big.bin"'
m.attach(att)
with open(sys.argv[3], "wb") as f:
    f.write(m.as_bytes(policy=policy.SMTP))
PY
	big_rss() { # big_rss HOW FILE: FILE to a fresh daemon, sent as HOW says
		local bdir=$WORK/mailctl-big-$1 bport bpid rest bhwm bstored size
		bport=$(free_port)
		mkdir -p "$bdir"
		mailctl_config "$bdir" "$bport" $((BIG + (1 << 20)))
		profile_args
		"$WORK/mailctl" serve --config "$bdir/config.toml" "${PROFILE_ARGS[@]}" >"$bdir/log" 2>&1 &
		bpid=$!
		track "$bpid"
		for _ in $(seq 100); do
			grep -q "inbound listeners up" "$bdir/log" 2>/dev/null && break
			sleep 0.1
		done
		rest=$(awk '/VmRSS/ {print $2}' "/proc/$bpid/status")
		if [[ $1 == nosize ]]; then
			size=$BIG
			smtp-source -s 1 -m 1 -l "$BIG" -f from@bench.example -t "$USER_NAME@bench.test" "127.0.0.1:$bport"
		else
			size=$(stat -c %s "$2")
			/usr/bin/python3 -c "import smtplib, sys
s = smtplib.SMTP('127.0.0.1', $bport); s.sendmail('from@bench.example', ['$USER_NAME@bench.test'], open(sys.argv[1], 'rb').read()); s.quit()" "$2"
		fi
		bhwm=$(awk '/VmHWM/ {print $2}' "/proc/$bpid/status")
		bstored=$(find "$bdir/state/mailboxes/$USER_NAME/inbox" -name '*.eml' | wc -l)
		kill "$bpid"
		wait "$bpid" 2>/dev/null || true
		[[ $bstored == 1 ]] || die "mailctl did not store the $size-byte message (log: $bdir/log)"
		if [[ $1 == attachment ]] && [[ $(find "$bdir/state/mailboxes/$USER_NAME/inbox" -path '*.attachments/big.bin' -size +$(((BIG * 7 / 10) / 1024))k | wc -l) != 1 ]]; then
			die "mailctl did not store the attachment (log: $bdir/log)"
		fi
		rm -rf "$bdir"
		awk -v size="$size" -v hwm="$bhwm" -v rest="$rest" 'BEGIN { printf "| %.1f MiB | %.1f MiB | %.1f MiB | %.2f× |", size / 1048576, rest / 1024, hwm / 1024, hwm * 1024 / size }'
	}
	BIG_OUT="Peak RSS (VmHWM) of a fresh daemon taking one large message (\`BIG=$BIG\`), against the message's size:

| message | size | RSS at rest before it | peak RSS | peak ÷ size |
| --- | --- | --- | --- | --- |
| plain text, no size declared (\`smtp-source -s 1 -m 1 -l $BIG\`) $(big_rss nosize)
| plain text, \`MAIL FROM SIZE=\` (Python's smtplib) $(big_rss plain "$WORK/big-plain.eml")
| text and an attachment of $(awk -v b="$BIG" 'BEGIN { printf "%.1f", (b - 4096) / 1.37 / 1048576 }') MiB in base64 (multipart/mixed), \`MAIL FROM SIZE=\` (Python's smtplib) $(big_rss attachment "$WORK/big-attachment.eml")"
fi

# spread FILE COLUMN: "median (min–max)" of a column.
spread() {
	sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%s (%s–%s)", m, v[1], v[NR] }'
}
median() { sort -g -k"$2","$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f×", a / b }'; }

FIRST=${CASES%% *}
HWM=$(cat "$WORK"/mailctl-*-"$FIRST".txt | sort -g -k4,4 | awk '{ v[NR] = $4 } END { printf "%.1f MiB (%.1f–%.1f)", v[int((NR + 1) / 2)] / 1024, v[1] / 1024, v[NR] / 1024 }')
human() { awk -v n="$1" 'BEGIN { if (n >= 1048576) printf "%g MiB", n / 1048576; else printf "%g KiB", n / 1024 }'; }
variant_label() { [[ $1 == kept ]] && echo "kept" || echo "deleted before"; }
rows() { # rows SERVER VARIANT CASE LABEL: compared with mailctl's medians in the same case and variant
	local f=$WORK/$1-$2-$3.txt m=$WORK/mailctl-$2-$3.txt m_acc m_cpu
	m_acc=$(median "$m" 1)
	m_cpu=$(median "$m" 3)
	printf '| %s × %s | %s | %s | %s | %s | %s | %s | %s |\n' "${3%%x*}" "$(human "${3#*x}")" "$(variant_label "$2")" "$4" \
		"$(spread "$f" 1)" "$(spread "$f" 2)" "$(spread "$f" 3)" \
		"$(ratio "$m_acc" "$(median "$f" 1)") / $(ratio "$m_acc" "$(median "$f" 2)")" \
		"$(ratio "$m_cpu" "$(median "$f" 3)")"
}
FSYNCS=$(for c in $CASES; do
	for variant in $VARIANTS; do
		printf '%s × %s %s: %s; ' "${c%%x*}" "$(human "${c#*x}")" "$(variant_label "$variant")" "$(spread "$WORK/mailctl-$variant-$c.txt" 5)"
	done
done | sed 's/; $//')
TABLE=$(for c in $CASES; do
	for variant in $VARIANTS; do
		rows mailctl "$variant" "$c" "mailctl serve, all checks on ($(msgs_for "${c#*x}") messages)"
		rows stock "$variant" "$c" "Postfix → Maildir, stock settings"
		rows tuned "$variant" "$c" "Postfix → Maildir, \`in_flow_delay = 0s\`, \`local_destination_concurrency_limit\` = sessions"
	done
done)

# Where the time goes: one extra, unmeasured pass per server under strace
# counts the system calls per message (fsyncs, renames, DNS queries) and the
# files each creates (opens with O_CREAT|O_EXCL or O_TMPFILE, mkdir) and
# deletes (unlink, rmdir), until every message is in the mailbox.
TRACE_OUT=""
TRACE_N=500
if [[ ${STRACE:-1} == 1 ]] && command -v strace >/dev/null; then
	echo "bench: strace pass" >&2
	tdir=$WORK/mailctl-trace
	tport=$(free_port)
	mkdir -p "$tdir"
	mailctl_config "$tdir" "$tport"
	"$WORK/mailctl" serve --config "$tdir/config.toml" >"$tdir/log" 2>&1 &
	tpid=$!
	track "$tpid"
	for _ in $(seq 100); do
		grep -q "inbound listeners up" "$tdir/log" && break
		sleep 0.1
	done
	strace -f -C -o "$tdir/strace.txt" -p "$tpid" 2>/dev/null &
	spid=$!
	sleep 1
	smtp-source -s "$SESSIONS" -m "$TRACE_N" -l "$LEN" -f from@bench.example -t "$USER_NAME@bench.test" "127.0.0.1:$tport"
	sleep 1.5 # a checkpoint (once a second) included
	kill -INT "$spid"
	wait "$spid" 2>/dev/null || true
	kill "$tpid"
	wait "$tpid" 2>/dev/null || true
	# The same for Postfix (stock settings): every process of the master's
	# tree is traced, and workers forked meanwhile are followed.
	pf_tune stock
	master=$(awk '{print $1}' "$PF/spool/pid/master.pid")
	mapfile -t tree < <({ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$master" '
		{ ppid[$1] = $4 } END { want[root] = 1; changed = 1
			while (changed) { changed = 0; for (p in ppid) if (!(p in want) && (ppid[p] in want)) { want[p] = 1; changed = 1 } }
			for (p in want) print p }')
	strace -f -C -o "$tdir/strace-postfix.txt" $(printf -- '-p %s ' "${tree[@]}") 2>/dev/null &
	spid=$!
	sleep 1
	smtp-source -s "$SESSIONS" -m "$TRACE_N" -l "$LEN" -f from@bench.example -t "$USER_NAME@bench.test" "127.0.0.1:$PF_PORT"
	for _ in $(seq 1200); do
		[[ $(find "$WORK/home/Maildir/new" -type f 2>/dev/null | wc -l) -ge $TRACE_N ]] && break
		sleep 0.05
	done
	sleep 0.5
	kill -INT "$spid"
	wait "$spid" 2>/dev/null || true
	maildir_aside "$tdir/maildir"
	calls() {
		awk '$NF ~ /^(fsync|fdatasync|syncfs|renameat2?|rename|link|linkat|unlink|unlinkat|openat|connect|sendto|sendmmsg|write|writev)$/ && $4 ~ /^[0-9]+$/ { print $NF, $4 }' "$1"
		# Files created and deleted, from the trace lines of successful
		# calls (a call another process interrupted is joined to its end).
		awk '/<unfinished \.\.\.>$/ { pend[$1] = $0; next }
			/<\.\.\. [a-z0-9_]+ resumed>/ { $0 = pend[$1] " " $0; delete pend[$1] }
			!/ = [0-9]+( .*)?$/ { next }
			/ (open|openat)\(.*O_CREAT\|O_EXCL/ || / (open|openat)\(.*O_TMPFILE/ || / (mkdir|mkdirat)\(/ { c++ }
			/ (unlink|unlinkat|rmdir)\(/ { d++ }
			END { print "files-created", c + 0; print "files-deleted", d + 0 }' "$1"
	}
	TRACE_OUT=$(join -a1 -a2 -e 0 -o 0,1.2,2.2 <(calls "$tdir/strace.txt" | sort) <(calls "$tdir/strace-postfix.txt" | sort) |
		awk -v n="$TRACE_N" '{ name = $1; if (sub(/^files-/, "files ", name) == 0) name = "`" name "`"; printf "| %s | %.2f | %.2f |\n", name, $2 / n, $3 / n }')
fi

GOBENCH_OUT=""
# The inbound path's micro-benchmarks (the store's List100k takes minutes).
GOBENCH_CMD="go test -bench 'Deliver\$|SMTPDeliver\$|Check\$' -run '^\$' ./store/ ./daemon/smtpin/ ./daemon/trust/"
if [[ $GOBENCH == 1 ]]; then
	# BenchmarkDeliver creates files (in TMPDIR, on the same file system as
	# a rule): like a kept measurement, it must not pay for the deletions
	# of the deleted-before ones just before (it ran twice as slow after them).
	settle
	echo "bench: go test -bench" >&2
	GOBENCH_OUT=$(cd "$ROOT" && eval "$GOBENCH_CMD" 2>&1 |
		grep -E '^(Benchmark|ok|goos|goarch|cpu|pkg)' || true)
fi

MODEL=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
FS=$(df -T "$WORK" | awk 'NR == 2 { print $2 }')
SECTION=$(
	cat <<EOF
<!-- inbound:begin -->
## Inbound: mailctl vs Postfix

Measured by \`sudo bench/run.sh\` on $(date -u +%Y-%m-%d): \`smtp-source -s SESSIONS -m N -l SIZE\`
over loopback for each load (sessions × message size), $REPS runs each (after a 200-message warm-up of $(human "$LEN")),
median and (min–max); every row is compared with mailctl's of the same load and variant. $(bench_fs_line)

Each load is measured in two variants, so that the comparison does not depend on the file
system's recent history: **kept**, the files of every measurement stay until the whole run ends,
no file is deleted before the last kept measurement has ended, and each measurement starts
${SETTLE:-61} s after the one before, synced; **deleted before**, the files of the measurement
before (another server's or its own) are deleted just before each measurement starts, as on a
server that purges, expires or delivers on. Every kept measurement runs first, then every deleted
one; within a variant the loads, runs and servers take turns.

| load | files of earlier runs | server | accepted msg/s (250 to DATA) | delivered msg/s (in the mailbox) | CPU ms per message | mailctl rate ÷ this (accepted / delivered) | mailctl CPU ÷ this |
| --- | --- | --- | --- | --- | --- | --- | --- |
$TABLE

mailctl's peak RSS (VmHWM, per run of $FIRST, fresh daemon): $HWM.

mailctl's inbound journal fsyncs per message (from the daemon's \`mailctl_inbound_journal_fsyncs_total\`, the fsyncs that
made the messages durable before their 250; no strace; median and (min–max)): $FSYNCS.

$BIG_OUT

- mailctl: \`mailctl serve\` with SPF, DKIM and DMARC checked for every message against a local
  DNS server (\`internal/dnstest/cmd/dnstestd\`; SPF passes, DMARC is published, messages are
  unsigned). Before each 250 the message is recorded in the inbound journal (group commit: one
  fsync shared by the deliveries waiting for it) and its Markdown + raw \`.eml\` are written into
  the mailbox without an fsync; a checkpoint (\`syncfs\`) once a second makes them durable before
  the journal lets them go (docs/security.md). A 250 means the message is in the mailbox, so
  accepted and delivered are the same. CPU is the daemon's utime+stime from \`/proc/PID/stat\`,
  checkpoints included; the DNS server's CPU is not counted.
- Postfix $(postconf -c "$PF/etc" -h mail_version): a private instance (own config, queue and data directories)
  with stock settings (one row) or with its two throttles for this workload lifted (other row:
  smtpd's \`in_flow_delay\` pause when arrivals outpace deliveries, and at most 2 concurrent local
  deliveries to one recipient), \`smtpd\` on a loopback port, local delivery to \`~/Maildir/\`, no SPF/DKIM/DMARC
  checks. Accepted is the smtp-source wall time (a 250 means the queue file is fsynced);
  delivered runs until every message is a file in \`Maildir/new\`. CPU is utime+stime(+cutime+cstime)
  summed over the master's process tree, including delivery.
- Machine: $(nproc) CPUs ($MODEL), $MEM RAM, Linux $(uname -r), $FS, $(go version | awk '{print $3}').
  The machine was shared with other work while measuring; compare rows of the same run.

Reproduce (as root, Debian with \`postfix\` and, for the system-call table, \`strace\` installed; Go as in go.mod; from the repository root):

\`\`\`
sudo bench/run.sh                   # rewrites this section
sudo bench/run.sh --no-write        # prints it only
sudo CASES="8x4096 32x4096 8x102400 8x1048576" VARIANTS="kept deleted" MSGS=2000 MSGS_100K=500 MSGS_1M=100 REPS=3 BIG=26214400 bench/run.sh
\`\`\`

$(if [[ -n $TRACE_OUT ]]; then
		printf 'System calls and files per message (a separate pass of %s messages of %s from %s sessions each under `strace -f -C`, not timed; Postfix with stock settings, counted until delivery to the Maildir; files created are opens with `O_CREAT|O_EXCL` or `O_TMPFILE` and `mkdir`, files deleted are `unlink` and `rmdir`):\n\n| per message | mailctl serve | Postfix → Maildir |\n| --- | --- | --- |\n%s\n' "$TRACE_N" "$(human "$LEN")" "$SESSIONS" "$TRACE_OUT"
	fi)

$(if [[ -n $GOBENCH_OUT ]]; then
		printf 'Go micro-benchmarks of the inbound path from the same run, after the measurements above and a settle as before a kept measurement (`%s`):\n\n```\n%s\n```\n' "$GOBENCH_CMD" "$GOBENCH_OUT"
	fi)
<!-- inbound:end -->
EOF
)

if [[ $WRITE == 0 ]]; then
	printf '%s\n' "$SECTION"
	exit 0
fi
write_section inbound "$DOC" "$SECTION"
