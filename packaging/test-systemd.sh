#!/bin/sh
# Boots a minimal Debian bookworm under systemd-nspawn with systemd as PID 1 and
# walks the README's road to production in it with the built .deb: dpkg -i,
# `mailctl setup --non-interactive` (which enables and starts the unit), the
# Type=notify start, a config change applied by `systemctl reload`, a crash
# restarted by systemd, the hardened unit writing every path the daemon must
# (store, queue, registry, a new DKIM key), and `systemctl stop` draining.
# Runs as root; needs debootstrap, systemd-nspawn and Debian's mirror.
# ROOTFS=DIR reuses a root made earlier by debootstrap (a copy is booted).
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
for c in debootstrap systemd-nspawn nsenter; do
	command -v $c >/dev/null || fail "$c not found"
done

tmp=$(mktemp -d)
nspawn_pid=""
cleanup() {
	if [ -n "$nspawn_pid" ]; then
		kill "$nspawn_pid" 2>/dev/null || true
		wait "$nspawn_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

step="build"
deb=$(VERSION=${VERSION:-} ./packaging/build-deb.sh | tail -n 1)
[ -f "$deb" ] || fail "build-deb.sh did not produce a package"

step="debootstrap"
root=$tmp/root
if [ -n "${ROOTFS:-}" ]; then
	cp -a "$ROOTFS" "$root"
else
	debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$root" \
		"${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$tmp/debootstrap.log" 2>&1 ||
		{ log=$tmp/debootstrap.log; fail "debootstrap"; }
fi
cp "$deb" "$root/root/mailctl.deb"

step="boot"
log=$tmp/boot.log
systemd-nspawn -q -D "$root" -b --private-network --register=no --keep-unit -M mailctl-ci >"$log" 2>&1 </dev/null &
nspawn_pid=$!
# The container's PID 1 is systemd-nspawn's child.
pid1=""
i=0
while [ -z "$pid1" ] && [ $i -lt 100 ]; do
	pid1=$(pgrep -P "$nspawn_pid" 2>/dev/null | head -n 1 || true)
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

step="setup"
log=$tmp/setup.log
inside mailctl setup --non-interactive --domain example.test --hostname mx.example.test --self-signed \
	--trusted-sender '*@example.org' >"$log" 2>&1 || fail "mailctl setup"
inside systemctl is-active --quiet mailctl || fail "setup did not start the unit: $(inside systemctl status mailctl 2>&1 | tail -n 5)"
[ "$(inside systemctl show -P Type mailctl)" = notify ] || fail "the unit is not Type=notify"

step="store, queue, registry writable"
log=$tmp/use.log
inside useradd -m agent >"$log" 2>&1 || fail "useradd"
inside mailctl mailboxes create agent --owner agent >>"$log" 2>&1 || fail "mailboxes create"
inside mailctl send --from postmaster --to agent@example.test --subject hello --body "from the queue" >>"$log" 2>&1 || fail "local send"
inside sh -c 'ls /var/lib/mailctl/mailboxes/agent/inbox/*.md' >>"$log" 2>&1 || fail "no message inside the store"
inside mailctl send --from postmaster --to someone@example.org --subject out --body "queued" >>"$log" 2>&1 || true
inside sh -c 'ls /var/lib/mailctl/queue' >>"$log" 2>&1 || fail "no queue directory"
inside mailctl dkim keygen --selector rotated --algorithm ed25519 >>"$log" 2>&1 || fail "dkim keygen (key rotation)"

step="reload"
log=$tmp/reload.log
pid_before=$(inside systemctl show -P MainPID mailctl)
inside sh -c 'printf "\n[[mailboxes]]\nname = \"declared\"\nowner = \"agent\"\n" >>/etc/mailctl/config.toml'
inside systemctl reload mailctl >"$log" 2>&1 || fail "systemctl reload: $(cat "$log")"
i=0
until inside mailctl mailboxes show declared >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 50 ] || fail "the reloaded config was not applied"
	sleep 0.2
done
[ "$(inside systemctl show -P MainPID mailctl)" = "$pid_before" ] || fail "reload restarted the daemon"

step="crash restart"
inside sh -c "kill -SEGV $pid_before" # the shell's kill: minbase has no procps
i=0
while :; do
	now=$(inside systemctl show -P MainPID mailctl)
	if [ "$now" != "$pid_before" ] && [ "$now" != 0 ] && inside systemctl is-active --quiet mailctl; then break; fi
	i=$((i + 1))
	[ $i -lt 100 ] || fail "systemd did not restart the crashed daemon"
	sleep 0.2
done
inside mailctl mailboxes show agent >/dev/null 2>&1 || fail "the restarted daemon does not answer"

step="stop"
inside systemctl stop mailctl >"$log" 2>&1 || fail "systemctl stop"
[ "$(inside systemctl show -P Result mailctl)" = success ] || fail "stop did not end cleanly: $(inside systemctl show -P Result mailctl)"
inside test -e /run/mailctl/mailctl.sock && fail "socket left after stop"

echo "test-systemd: ok $(basename "$deb"): booted systemd as PID 1, installed, setup started the notify unit, store/queue/registry/DKIM writable, reload applied, crash restarted, stop clean"
