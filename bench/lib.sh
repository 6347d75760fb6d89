# Shared by the bench scripts; sourced, not run.

# Everything is built as it ships: static, pure Go.
export CGO_ENABLED=0

# track PID: a process the run started in the background, which
# stop_tracked (the scripts' cleanup) stops. The list is a file in WORK, not
# a variable: a daemon started inside a command substitution, as
# $(big_rss ...) does, runs in a subshell whose variables the script never
# sees, and a failure there ends the subshell with the daemon running.
track() { echo "$1" >>"$WORK/started.pids"; }
stop_tracked() {
	[[ -f $WORK/started.pids ]] || return 0
	local p
	while read -r p; do kill "$p" 2>/dev/null; done <"$WORK/started.pids"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

# profile_args: sets PROFILE_ARGS to the arguments a started `mailctl serve`
# takes: with CPU_PROFILE=DIR set (bench/pgo.sh), --cpu-profile DIR, so that
# the daemon writes its CPU profile to a new file there when it stops;
# otherwise none.
profile_args() {
	PROFILE_ARGS=()
	if [[ -n ${CPU_PROFILE:-} ]]; then
		PROFILE_ARGS=(--cpu-profile "$CPU_PROFILE")
	fi
}
TCK=$(getconf CLK_TCK)

# cpu_ticks PID...: utime+stime+cutime+cstime of the processes and all their
# live descendants. Exited children are in their parent's cutime/cstime once
# reaped, so a before/after difference covers short-lived workers too.
cpu_ticks() {
	# Processes come and go while this reads; a vanished one is skipped.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v roots="$*" '
		BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1 }
		{
			pid = $1; line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
			ppid[pid] = f[2]; t[pid] = f[12] + f[13] + f[14] + f[15]
		}
		END {
			changed = 1
			while (changed) { changed = 0; for (p in ppid) if (!(p in want) && (ppid[p] in want)) { want[p] = 1; changed = 1 } }
			s = 0; for (p in want) if (p in t) s += t[p]; print s
		}'
}

# pf_master_cf PORT: the master.cf of a private Postfix instance with smtpd on
# 127.0.0.1:PORT, local delivery and the SMTP client, nothing chrooted.
pf_master_cf() {
	cat <<EOF2
127.0.0.1:$1 inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
EOF2
}

# start_postfix DIR PORT HOSTNAME DOMAIN: a private Postfix instance, its own
# config, queue and data directories under DIR, smtpd on 127.0.0.1:PORT
# only, stock settings but for the main.cf lines read from stdin.
start_postfix() {
	local dir=$1
	mkdir -p "$dir/etc" "$dir/spool" "$dir/data"
	chown postfix: "$dir/data"
	{
		cat <<EOF2
compatibility_level = 3.6
queue_directory = $dir/spool
data_directory = $dir/data
maillog_file = $dir/maillog
maillog_file_prefixes = $dir
mail_owner = postfix
setgid_group = postdrop
myhostname = $3
mydomain = $4
inet_interfaces = loopback-only
inet_protocols = ipv4
alias_maps =
alias_database =
biff = no
notify_classes =
EOF2
		cat
	} >"$dir/etc/main.cf"
	pf_master_cf "$2" >"$dir/etc/master.cf"
	postfix -c "$dir/etc" check
	postfix -c "$dir/etc" start >/dev/null 2>&1
}

# write_section NAME DOC SECTION: replace the text between
# <!-- NAME:begin --> and <!-- NAME:end --> in DOC with SECTION (which
# carries the markers), or append it when DOC has no such section.
write_section() {
	local name=$1 doc=$2 section=$3
	[[ -f $doc ]] || printf '# Benchmarks\n\nNumbers below are measured, never estimated; each section says how to reproduce it.\n\n' >"$doc"
	NAME="$name" SECTION="$section" python3 - "$doc" <<'PY'
import os, re, sys
path, name, sec = sys.argv[1], os.environ["NAME"], os.environ["SECTION"]
text = open(path, encoding="utf-8").read()
pattern = r"<!-- %s:begin -->.*?<!-- %s:end -->" % (name, name)
if re.search(pattern, text, flags=re.S):
    text = re.sub(pattern, lambda m: sec, text, flags=re.S)
else:
    text = text.rstrip("\n") + "\n\n" + sec + "\n"
open(path, "w", encoding="utf-8").write(text)
PY
	echo "bench: wrote $doc" >&2
}

# bench_fs NAME: sets WORK to a fresh directory in BENCH_DIR (default
# /var/tmp) for a run's files, both servers' alike; bench_fs_cleanup removes
# it. bench_fs_line says, for the docs, what filesystem that is.
#
# BENCH_FS=ext4 (or another type with a mkfs.TYPE): the files go instead on a
# file system of that type made for the run with mkfs's defaults (an ext4
# has a journal), in a sparse image of BENCH_FS_SIZE (default 32G) in
# BENCH_DIR, loop-mounted; cleanup unmounts it and removes the image.
FS_IMAGE_DIR=""
bench_fs() {
	if [[ -z ${BENCH_FS:-} ]]; then
		WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/mailctl-$1.XXXXXX")
		return
	fi
	command -v "mkfs.$BENCH_FS" >/dev/null || die "BENCH_FS=$BENCH_FS: mkfs.$BENCH_FS not found"
	FS_IMAGE_DIR=$(mktemp -d "${BENCH_DIR:-/var/tmp}/mailctl-$1-fs.XXXXXX")
	truncate -s "${BENCH_FS_SIZE:-32G}" "$FS_IMAGE_DIR/image"
	"mkfs.$BENCH_FS" -q "$FS_IMAGE_DIR/image" >/dev/null || die "mkfs.$BENCH_FS failed"
	mkdir "$FS_IMAGE_DIR/mnt"
	mount -o loop "$FS_IMAGE_DIR/image" "$FS_IMAGE_DIR/mnt" || die "cannot loop-mount the $BENCH_FS image"
	chmod 755 "$FS_IMAGE_DIR" "$FS_IMAGE_DIR/mnt" # the servers' users reach their directories below
	WORK=$FS_IMAGE_DIR/mnt/work
	mkdir "$WORK"
}
bench_fs_cleanup() {
	rm -rf "$WORK"
	if [[ -n $FS_IMAGE_DIR ]]; then
		umount "$FS_IMAGE_DIR/mnt" && rm -rf "$FS_IMAGE_DIR"
	fi
}
bench_fs_line() {
	local dev fs journal=""
	dev=$(findmnt -n -o SOURCE --target "$WORK")
	fs=$(findmnt -n -o FSTYPE --target "$WORK")
	# An ext4 with a journal has /proc/fs/jbd2/<device>-<inode>.
	if [[ $fs == ext4 ]] && ! compgen -G "/proc/fs/jbd2/${dev##*/}-*" >/dev/null; then
		journal=" without a journal: its inode allocator reads and skips every inode freed in the last 60 s (360 s while its table block is dirty), so creating a file costs more the more anyone deleted lately"
	fi
	if [[ -n $FS_IMAGE_DIR ]]; then
		[[ $fs == ext4 && -z $journal ]] && journal=" with a journal"
		echo "Files are on a file system made for the run: $fs$journal (BENCH_FS=$BENCH_FS: mkfs's defaults, a loop-mounted sparse image in \`${BENCH_DIR:-/var/tmp}\`)."
		return
	fi
	echo "Files are in \`${BENCH_DIR:-/var/tmp}\` (BENCH_DIR), on $fs$journal."
}
