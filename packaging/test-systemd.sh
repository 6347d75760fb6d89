#!/bin/sh
# Boots a minimal Debian bookworm under systemd-nspawn with systemd as PID 1 and
# walks docs/setup.md's operator path in it, as that page writes it, with the
# built .deb: dpkg -i, `mailctl setup --non-interactive` (which enables and
# starts the unit), `mailctl doctor` as root and as a user, `sudo -u agent
# mailctl mailboxes create agent`, `agents setup`, mail in over SMTP; then the
# Type=notify start, a config change applied by `systemctl reload`, a crash
# restarted by systemd, the hardened unit writing every path the daemon must
# (store, queue, registry, a new DKIM key), and `systemctl stop` draining: an
# SMTP DATA in progress when stop is issued completes with 250 and is on disk,
# and a queued outbound item is still queued after the restart; root's doctor
# reports a config key waiting for a restart, the certbot deploy hook of
# docs/setup.md renews the certificate into use (doctor's probes leaving no
# WARN), docs/operations.md's debug drop-in turns DEBUG on and a message is
# followed through the journal by its queue id, its CPU profile drop-in
# writes a profile go tool pprof reads, and dpkg -P leaves no unit link
# behind.
# Runs as root; needs debootstrap, systemd-nspawn and Debian's mirror.
# `test-systemd.sh --fetch-root DIR` only makes that root, in DIR, and exits:
# CI fetches it while its tests run. ROOTFS=DIR reuses a root made earlier
# (by --fetch-root or by debootstrap; a copy is booted;
# without sudo in it, runuser stands in for `sudo -u`).
# Prints one summary line; exits non-zero on the first failure.
set -eu

cd "$(dirname "$0")/.."
step="start"
fail() {
	echo "test-systemd: FAIL at $step: $*" >&2
	[ -n "${log:-}" ] && [ -f "$log" ] && tail -n 30 "$log" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || fail "run as root"
for c in debootstrap systemd-nspawn nsenter openssl; do
	command -v $c >/dev/null || fail "$c not found"
done

# fetch_root DIR: a minimal Debian bookworm with systemd as init, fetched
# from the mirror; its log is DIR.log.
fetch_root() {
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,sudo bookworm "$1" \
		"${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$1.log" 2>&1
}
if [ "${1:-}" = --fetch-root ]; then
	[ -n "${2:-}" ] || fail "--fetch-root needs a folder"
	fetch_root "$2" || { log=$2.log; fail "debootstrap"; }
	exit 0
fi

tmp=$(mktemp -d)
nspawn_pid=""
cleanup() {
	trap '' HUP INT TERM # a second signal does not cut the cleanup short
	if [ -n "$nspawn_pid" ]; then
		kill "$nspawn_pid" 2>/dev/null || true
		wait "$nspawn_pid" 2>/dev/null || true
	fi
	# A debootstrap or container cut short may leave /proc, /sys or /dev
	# mounted in the root: rm stays on this file system, out of them.
	rm -rf --one-file-system "$tmp" || true
}
trap cleanup EXIT
# A runner aborting the script signals it. Debian's sh (dash) runs no EXIT
# trap when a signal ends it, so the container booted below went on running.
# Exit as the signal would (128+signo), through cleanup.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

step="build"
deb=$(VERSION=${VERSION:-} ./packaging/build-deb.sh | tail -n 1)
[ -f "$deb" ] || fail "build-deb.sh did not produce a package"

step="debootstrap"
root=$tmp/root
if [ -n "${ROOTFS:-}" ]; then
	cp -a "$ROOTFS" "$root"
else
	fetch_root "$root" || { log=$root.log; fail "debootstrap"; }
fi
cp "$deb" "$root/root/mailctl.deb"
# As on an installed host, the host name resolves (sudo asks).
echo "127.0.1.1 $(cat "$root/etc/hostname")" >>"$root/etc/hosts"

step="boot"
log=$tmp/boot.log
systemd-nspawn -q -D "$root" -b --private-network --register=no --keep-unit -M mailctl-ci >"$log" 2>&1 </dev/null &
nspawn_pid=$!
# The container's PID 1 is systemd-nspawn's child. Until it has exec'd
# systemd it is still named systemd-nspawn and its root is not the
# container's yet: nsenter then lands on the host's root, so wait for the name.
pid1=""
i=0
while [ -z "$pid1" ] && [ $i -lt 100 ]; do
	pid1=$(pgrep -x -P "$nspawn_pid" systemd 2>/dev/null | head -n 1 || true)
	i=$((i + 1))
	sleep 0.1
done
[ -n "$pid1" ] || fail "no container process"
inside() { nsenter -t "$pid1" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
i=0
until inside systemctl is-system-running --wait >/dev/null 2>&1 || [ "$(inside systemctl is-system-running 2>/dev/null)" = degraded ]; do
	i=$((i + 1))
	[ $i -lt 60 ] || fail "systemd did not finish booting: $(inside systemctl is-system-running 2>&1)"
	sleep 0.5
done
[ "$(inside readlink /proc/1/exe)" = /usr/lib/systemd/systemd ] || fail "PID 1 is not systemd"

step="dpkg -i"
log=$tmp/dpkg.log
inside dpkg -i /root/mailctl.deb >"$log" 2>&1 || fail "dpkg -i"
inside systemctl is-active --quiet mailctl && fail "the unit runs before setup"

# `sudo -u USER -H CMD…` as docs/setup.md writes it; runuser in a root made
# without sudo (ROOTFS).
as_user() {
	u=$1
	shift
	if inside test -x /usr/bin/sudo; then
		inside sudo -u "$u" -H "$@"
	else
		inside runuser -u "$u" -- env HOME="/home/$u" "$@"
	fi
}
# Doctor exits 1 on any fail; on --private-network only the DNS lookups may
# fail (no resolver answers), everything about the host must pass.
doctor_ok() {
	rc=0
	out=$("$@" 2>&1) || rc=$?
	echo "$out" >>"$log"
	[ $rc = 0 ] && return 0
	bad=$(echo "$out" | grep '^fail ' | grep -Ev '^fail +(dns|dkim\.dns)[a-z_.]* ' || true)
	[ -z "$bad" ] && echo "$out" | grep -q '^fail ' || { echo "$bad"; return 1; }
}
# Polls `cmd…` for up to N/5 seconds.
wait_for() {
	n=$1
	shift
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt "$n" ] || return 1
		sleep 0.2
	done
}

step="setup"
log=$tmp/setup.log
inside mailctl setup --non-interactive --domain example.test --hostname mx.example.test --self-signed \
	--trusted-sender '*@example.org' --catch-all catchall >"$log" 2>&1 || fail "mailctl setup"
inside systemctl is-active --quiet mailctl || fail "setup did not start the unit: $(inside systemctl status mailctl 2>&1 | tail -n 5)"
[ "$(inside systemctl show -P Type mailctl)" = notify ] || fail "the unit is not Type=notify"
inside mailctl mailboxes show catchall >>"$log" 2>&1 || fail "--catch-all catchall made no mailbox"

step="sudo mailctl doctor"
log=$tmp/doctor.log
bad=$(doctor_ok inside mailctl doctor) || fail "doctor fails beyond DNS: $bad"

step="mailboxes as the agent's user"
log=$tmp/use.log
inside useradd -m agent >"$log" 2>&1 || fail "useradd"
as_user agent mailctl mailboxes create agent >>"$log" 2>&1 || fail "sudo -u agent mailctl mailboxes create agent"
inside mailctl mailboxes show agent 2>>"$log" | grep -q '^owner  *agent ' || fail "the mailbox is not agent's: $(inside mailctl mailboxes show agent 2>&1)"
bad=$(doctor_ok as_user agent mailctl doctor) || fail "doctor as agent fails beyond DNS: $bad"
as_user agent mailctl agents setup claude-code >>"$log" 2>&1 || fail "sudo -u agent -H mailctl agents setup claude-code"
as_user agent mailctl agents list 2>>"$log" | grep -q claude || fail "agents list does not show claude-code"

step="store, queue, registry writable"
inside mailctl send --from postmaster --to agent@example.test --subject hello --body "from the queue" >>"$log" 2>&1 || fail "local send"
inside sh -c 'ls /var/lib/mailctl/mailboxes/agent/inbox/*.md' >>"$log" 2>&1 || fail "no message inside the store"
# No network: the item stays queued for a retry, and must survive the stop.
inside mailctl send --from postmaster --to someone@example.org --subject out --body "queued" >>"$log" 2>&1 || true
inside mailctl queue list 2>>"$log" | grep -q someone@example.org || fail "the outbound item is not queued: $(inside mailctl queue list 2>&1)"
inside mailctl dkim keygen --selector rotated --algorithm ed25519 >>"$log" 2>&1 || fail "dkim keygen (key rotation)"

step="reload"
log=$tmp/reload.log
pid_before=$(inside systemctl show -P MainPID mailctl)
inside sh -c 'printf "\n[[mailboxes]]\nname = \"declared\"\nowner = \"agent\"\n" >>/etc/mailctl/config.toml'
inside systemctl reload mailctl >"$log" 2>&1 || fail "systemctl reload: $(cat "$log")"
wait_for 50 inside mailctl mailboxes show declared || fail "the reloaded config was not applied"
[ "$(inside systemctl show -P MainPID mailctl)" = "$pid_before" ] || fail "reload restarted the daemon"

# Root's doctor reads the files, so what the running daemon has not applied
# comes from the daemon: a key that needs a restart.
step="doctor reports a key waiting for a restart"
log=$tmp/pending.log
inside sh -c 'printf "\n[delivery]\nretry_for = \"4d\"\n" >>/etc/mailctl/config.toml'
inside systemctl reload mailctl >"$log" 2>&1 || fail "systemctl reload: $(cat "$log")"
pending() { inside mailctl doctor 2>&1 | grep -q 'config.restart_pending .*delivery.retry_for'; }
wait_for 50 pending || fail "root's doctor does not report config.restart_pending: $(inside mailctl doctor 2>&1 | head -n 20)"

# docs/setup.md's certbot deploy hook, as the page writes it, run the way
# certbot runs it after a renewal (RENEWED_LINEAGE, live/ links into
# archive/): the daemon serves the new certificate, same main PID.
step="certificate renewal with the certbot deploy hook"
log=$tmp/renew.log
t0=$(date +%s)
served_fp() { inside mailctl doctor --json 2>/dev/null | grep -o 'SHA-256 [0-9a-f]*' | head -n 1 | cut -d' ' -f2; }
before=$(served_fp || true)
[ -n "$before" ] || fail "doctor names no served certificate: $(inside mailctl doctor 2>&1 | grep tls)"
le=$root/etc/letsencrypt
mkdir -p "$le/archive/mx.example.test" "$le/live/mx.example.test" "$le/renewal-hooks/deploy"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 90 -subj /CN=mx.example.test \
	-addext subjectAltName=DNS:mx.example.test -keyout "$le/archive/mx.example.test/privkey1.pem" \
	-out "$le/archive/mx.example.test/fullchain1.pem" >"$log" 2>&1 || fail "openssl req"
for f in fullchain privkey; do ln -s "../../archive/mx.example.test/${f}1.pem" "$le/live/mx.example.test/$f.pem"; done
new=$(openssl x509 -in "$le/archive/mx.example.test/fullchain1.pem" -outform DER | sha256sum | cut -d' ' -f1)
hook=$le/renewal-hooks/deploy/mailctl
awk '/^```sh$/ { b = 1; buf = ""; next } b && /^```$/ { if (buf ~ /renewal-hooks\/deploy\/mailctl/) printf "%s", buf; b = 0; next } b { buf = buf $0 "\n" }' \
	docs/setup.md | sed 's/mx\.example\.com/mx.example.test/g' >"$hook"
grep -q 'systemctl reload mailctl' "$hook" || fail "docs/setup.md has no deploy hook that reloads"
chmod 755 "$hook"
inside env RENEWED_LINEAGE=/etc/letsencrypt/live/mx.example.test /etc/letsencrypt/renewal-hooks/deploy/mailctl >>"$log" 2>&1 ||
	fail "the deploy hook: $(tail -n 5 "$log")"
renewed() { [ "$(served_fp)" = "$new" ]; }
wait_for 50 renewed || fail "the daemon serves $(served_fp), not the renewed $new (before: $before)"
[ "$(inside systemctl show -P MainPID mailctl)" = "$pid_before" ] || fail "the renewal restarted the daemon"
inside journalctl -u mailctl --no-pager >"$log" 2>&1
grep -q "TLS certificate now in use.*fingerprint=$new" "$log" || fail "no log line puts $new into use"
# Doctor's probes (SMTP and STARTTLS) end with QUIT: nothing at WARN since
# t0 but the restart-pending reminder each reload repeats.
warn=$(inside journalctl -u mailctl --since "@$t0" --no-pager 2>&1 | grep 'level=WARN' | grep -v 'take effect only at the next restart' || true)
[ -z "$warn" ] || fail "WARN lines while doctor ran: $warn"

step="crash restart"
inside sh -c "kill -SEGV $pid_before" # the shell's kill: minbase has no procps
restarted() {
	now=$(inside systemctl show -P MainPID mailctl)
	[ "$now" != "$pid_before" ] && [ "$now" != 0 ] && inside systemctl is-active --quiet mailctl
}
wait_for 100 restarted || fail "systemd did not restart the crashed daemon"
inside mailctl mailboxes show agent >/dev/null 2>&1 || fail "the restarted daemon does not answer"

# docs/setup.md step 6 with bash's /dev/tcp for swaks (minbase has neither
# swaks nor python): the message's last line is held back until systemd has
# sent SIGTERM and the daemon has closed its listener, then the DATA must
# still end in 250 and the message be on disk.
step="stop drains an SMTP delivery"
log=$tmp/drain.log
cat >"$root/root/drain.sh" <<'DRAIN'
set -u
exec 3<>/dev/tcp/127.0.0.1/25 || exit 1
expect() {
	while IFS= read -r -t 10 line <&3; do
		line=${line%$'\r'}
		echo "S: $line"
		case $line in "$1 "*) return 0 ;; "$1-"*) ;; *) echo "wanted $1"; exit 1 ;; esac
	done
	echo "no reply, wanted $1"
	exit 1
}
say() { printf '%s\r\n' "$1" >&3; echo "C: $1"; }
expect 220
say "EHLO client.example.org"; expect 250
say "MAIL FROM:<you@example.org>"; expect 250
say "RCPT TO:<agent@example.test>"; expect 250
say "DATA"; expect 354
say "From: you@example.org"
say "To: agent@example.test"
say "Subject: drained"
say "Message-ID: <drain@example.org>"
say ""
say "sent while systemd stops mailctl"
systemctl stop --no-block mailctl
i=0
# Shutdown has begun once new connections are refused.
while (exec 4<>/dev/tcp/127.0.0.1/25) 2>/dev/null; do
	i=$((i + 1)); [ $i -lt 100 ] || { echo "the listener stayed open after stop"; exit 1; }
	sleep 0.1
done
state=$(systemctl show -P ActiveState mailctl)
echo "unit: $state"
[ "$state" = deactivating ] || { echo "the unit is $state, not deactivating"; exit 1; }
say "."; expect 250
say "QUIT"; expect 221
DRAIN
inside bash /root/drain.sh >"$log" 2>&1 || fail "SMTP DATA during stop: $(tail -n 1 "$log")"
stopped() { [ "$(inside systemctl show -P ActiveState mailctl)" = inactive ]; }
wait_for 150 stopped || fail "the unit did not stop"
[ "$(inside systemctl show -P Result mailctl)" = success ] || fail "stop did not end cleanly: $(inside systemctl show -P Result mailctl)"
inside test -e /run/mailctl/mailctl.sock && fail "socket left after stop"
inside sh -c 'grep -l "sent while systemd stops" /var/lib/mailctl/mailboxes/agent/inbox/*.md' >>"$log" 2>&1 ||
	fail "the message accepted during stop is not on disk"

step="restart keeps the mail"
inside systemctl start mailctl >>"$log" 2>&1 || fail "systemctl start"
as_user agent mailctl mailboxes show agent 2>>"$log" | grep -q '^inbox  *2 ' || fail "agent's inbox after restart: $(as_user agent mailctl mailboxes show agent 2>&1)"
inside mailctl queue list 2>>"$log" | grep -q someone@example.org || fail "the queued item was lost in the stop: $(inside mailctl queue list 2>&1)"
inside systemctl stop mailctl >>"$log" 2>&1 || fail "systemctl stop"
[ "$(inside systemctl show -P Result mailctl)" = success ] || fail "the second stop did not end cleanly"

# docs/operations.md's debug drop-in, run as the page writes it (sudo
# dropped where the root has none), then one message followed by its queue
# id with the page's journalctl filter.
step="debug logs with the drop-in of docs/operations.md"
log=$tmp/debug.log
t1=$(date +%s)
awk '/^### Debug logs/ { s = 1 } s && /^```$/ { if (b) exit; b = 1; next } b' docs/operations.md >"$tmp/debug.sh"
grep -q 'serve --debug' "$tmp/debug.sh" || fail "no debug drop-in in docs/operations.md"
inside test -x /usr/bin/sudo || sed -i 's/sudo //g' "$tmp/debug.sh"
cp "$tmp/debug.sh" "$root/root/debug.sh"
inside sh -e /root/debug.sh >"$log" 2>&1 || fail "the drop-in lines: $(tail -n 3 "$log")"
inside systemctl is-active --quiet mailctl || fail "the unit did not come back with --debug"
inside mailctl send --from postmaster --to agent@example.test --subject debug --body "followed" >>"$log" 2>&1 || fail "send with debug on"
item=$(inside journalctl -u mailctl --since "@$t1" --no-pager -g 'msg="message queued"' 2>/dev/null | grep -o 'item=[^ ]*' | tail -n 1 | cut -d= -f2)
[ -n "$item" ] || fail "no queued line with its item= since the drop-in"
followed() { inside journalctl -u mailctl --no-pager -g "item=$item" 2>/dev/null | grep -q 'msg="recipient result"'; }
wait_for 50 followed || fail "journalctl -g 'item=$item' finds no recipient result"
inside journalctl -u mailctl --since "@$t1" --no-pager 2>/dev/null | grep -q 'level=DEBUG msg="delivery attempt"' ||
	fail "no DEBUG line in the journal with the drop-in"
inside sh -c 'rm /etc/systemd/system/mailctl.service.d/debug.conf && systemctl daemon-reload && systemctl stop mailctl' >>"$log" 2>&1 || fail "removing the drop-in"

# docs/operations.md's CPU profile: its two blocks as the page writes them,
# a message between them; the restart in the second writes the profile,
# which `go tool pprof -top` reads (here from the host: the Go that built
# the package).
step="cpu profile with the drop-in of docs/operations.md"
log=$tmp/profile.log
awk '/^### A CPU profile/ { s = 1 } s && /^```$/ { n++; if (n == 2) exit; b = 1; next } s && b' docs/operations.md >"$tmp/profile-on.sh"
awk '/^### A CPU profile/ { s = 1 } s && /^```$/ { n++; if (n == 4) exit; next } s && n == 3' docs/operations.md >"$tmp/profile-off.sh"
grep -q 'serve --cpu-profile' "$tmp/profile-on.sh" || fail "no profile drop-in in docs/operations.md"
grep -q 'rm /etc/systemd/system/mailctl.service.d/profile.conf' "$tmp/profile-off.sh" || fail "no way back in docs/operations.md"
inside test -x /usr/bin/sudo || sed -i 's/sudo //g' "$tmp/profile-on.sh" "$tmp/profile-off.sh"
cp "$tmp/profile-on.sh" "$root/root/profile-on.sh"
cp "$tmp/profile-off.sh" "$root/root/profile-off.sh"
inside sh -e /root/profile-on.sh >"$log" 2>&1 || fail "the drop-in lines: $(tail -n 3 "$log")"
inside systemctl is-active --quiet mailctl || fail "the unit did not come back with --cpu-profile"
inside mailctl send --from postmaster --to agent@example.test --subject profiled --body "profiled" >>"$log" 2>&1 || fail "send with the profile on"
inside sh -e /root/profile-off.sh >>"$log" 2>&1 || fail "the lines turning it off: $(tail -n 3 "$log")"
inside systemctl is-active --quiet mailctl || fail "the unit did not come back without the profile"
inside systemctl cat mailctl 2>/dev/null | grep -q cpu-profile && fail "the drop-in is still in effect"
set -- "$root"/var/lib/mailctl-profile/serve-*.pprof
[ $# = 1 ] && [ -s "$1" ] || fail "want one profile in /var/lib/mailctl-profile, found: $*"
go tool pprof -top "$root/usr/bin/mailctl" "$1" >>"$log" 2>&1 || fail "go tool pprof -top could not read $1"
grep -q 'flat%' "$log" || fail "go tool pprof -top printed no table"
inside systemctl stop mailctl >>"$log" 2>&1 || fail "systemctl stop"

# Purge removes the unit's enablement with the unit: no link left dangling.
step="dpkg -P"
log=$tmp/purge.log
inside dpkg -P mailctl >"$log" 2>&1 || fail "dpkg -P"
left=$(inside find /etc/systemd/system -path '*.wants/mailctl.service' 2>&1)
[ -z "$left" ] || fail "dpkg -P left $left"

echo "test-systemd: ok $(basename "$deb"): booted systemd as PID 1, installed, setup started the notify unit, doctor clean but for DNS, mailbox created with sudo -u agent, agents setup, store/queue/registry/DKIM writable, reload applied, root's doctor saw the key waiting for a restart, the certbot deploy hook's renewal served after reload (same PID, no WARN from doctor), crash restarted, stop drained an SMTP DATA in progress (250, on disk), the queue survived the restart, the debug drop-in logged DEBUG and a message was followed by its queue id, the profile drop-in wrote a CPU profile pprof reads, purge left no unit link"
