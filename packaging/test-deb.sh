#!/bin/sh
# End-to-end check of the .deb, run as root on a throwaway machine (CI):
# build, dpkg -i, nothing started, `mailctl version`, `mailctl setup
# --non-interactive --root`, `mailctl serve` on high ports, the socket
# answers, doctor runs, dpkg -r and dpkg -P, mail and keys remain.
# Prints one summary line; exits non-zero on the first failure.
set -eu

cd "$(dirname "$0")/.."
step="start"
fail() {
	echo "test-deb: FAIL at $step: $*" >&2
	exit 1
}
[ "$(id -u)" = 0 ] || fail "run as root (it installs a package)"
command -v dpkg >/dev/null || fail "dpkg not found"
command -v python3 >/dev/null || fail "python3 not found (it picks a free port)"
if dpkg -s mailctl >/dev/null 2>&1; then
	fail "mailctl is already installed here; run this on a throwaway machine"
fi
[ -e /etc/mailctl/config.toml ] && fail "/etc/mailctl/config.toml exists; run this on a throwaway machine"

tmp=$(mktemp -d)
serve_pid=""
cleanup() {
	trap '' HUP INT TERM # a second signal does not cut the cleanup short
	if [ -n "$serve_pid" ]; then
		kill "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
	fi
	# Whatever else serves this run's config (the stop step fails on one).
	if [ -n "${cfg:-}" ]; then
		pkill -f -- "serve --config $cfg" 2>/dev/null || true
	fi
	if dpkg -s mailctl >/dev/null 2>&1; then
		dpkg -P mailctl >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
# A runner aborting the script signals it. Debian's sh (dash) runs no EXIT
# trap when a signal ends it, so the serve started below went on running and
# the package stayed installed. Exit as the signal would (128+signo),
# through cleanup.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

step="build"
deb=$(VERSION=${VERSION:-} ./packaging/build-deb.sh | tail -n 1)
[ -f "$deb" ] || fail "build-deb.sh did not produce a package"
version=$(dpkg-deb -f "$deb" Version)

step="one flavour"
# One static pure-Go binary: nothing to depend on, no libssl to recommend.
[ -z "$(dpkg-deb -f "$deb" Depends)" ] || fail "the package depends on $(dpkg-deb -f "$deb" Depends)"
if dpkg-deb -f "$deb" Recommends | grep -qi ssl; then
	fail "the package recommends $(dpkg-deb -f "$deb" Recommends)"
fi

step="lintian"
if command -v lintian >/dev/null; then
	lintian --tag-display-limit 0 "$deb" >"$tmp/lintian.log" 2>&1 || true
	if grep -E '^[EW]: ' "$tmp/lintian.log" >&2; then
		fail "lintian reports the tags above"
	fi
fi

step="install"
etc_existed=no
[ -d /etc/mailctl ] && etc_existed=yes
dpkg -i "$deb" >"$tmp/dpkg-i.log" 2>&1 || { cat "$tmp/dpkg-i.log" >&2; fail "dpkg -i"; }
for f in /usr/bin/mailctl /usr/lib/systemd/system/mailctl.service /usr/lib/tmpfiles.d/mailctl.conf \
	/usr/share/doc/mailctl/config.example.toml /usr/share/man/man1/mailctl.1.gz \
	/usr/share/bash-completion/completions/mailctl /usr/share/zsh/vendor-completions/_mailctl; do
	[ -f "$f" ] || fail "$f not installed"
done
for f in /usr/share/doc/mailctl/changelog.gz /usr/share/doc/mailctl/README.md /usr/share/doc/mailctl/protocol/README.md \
	/usr/share/fish/vendor_completions.d/mailctl.fish; do
	[ -f "$f" ] || fail "$f not installed"
done
# Every page the shipped docs link to is shipped.
for page in /usr/share/doc/mailctl/docs/*.md /usr/share/doc/mailctl/README.md; do
	for link in $(grep -o '](\([A-Za-z0-9_./-]*\.md\)' "$page" | sed 's/^](//'); do
		[ -f "$(dirname "$page")/$link" ] || fail "$page links to $link, which is not installed"
	done
done
dpkg --verify mailctl >"$tmp/verify.log" 2>&1 || fail "dpkg --verify: $(cat "$tmp/verify.log")"
[ -s /var/lib/dpkg/info/mailctl.md5sums ] || fail "the package has no md5sums"
[ -e /etc/mailctl/config.toml ] && fail "installing wrote a config"
grep -q "mailctl setup" "$tmp/dpkg-i.log" || fail "postinst did not say to run mailctl setup"
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet mailctl.service 2>/dev/null; then
	fail "the unit is enabled before setup"
fi
[ "$(stat -c %a /var/lib/mailctl)" = 711 ] || fail "/var/lib/mailctl is not 0711"
[ "$(stat -c %a /etc/mailctl/dkim)" = 700 ] || fail "/etc/mailctl/dkim is not 0700"

step="static"
# No ELF interpreter and no dynamic section: the kernel runs it as it is.
python3 - /usr/bin/mailctl <<'PY' || fail "/usr/bin/mailctl is dynamically linked"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:4] == b"\x7fELF" and b[4] == 2, "not a 64-bit ELF file"
end = "<" if b[5] == 1 else ">"
phoff, = struct.unpack_from(end + "Q", b, 0x20)
phentsize, phnum = struct.unpack_from(end + "HH", b, 0x36)
for i in range(phnum):
    ptype, = struct.unpack_from(end + "I", b, phoff + i * phentsize)
    if ptype in (2, 3):  # PT_DYNAMIC, PT_INTERP
        sys.exit(1)
PY

# Every mailctl below is the package's: another one earlier on PATH (a
# `go install` into ~/go/bin, say) must not stand in for it.
mailctl() { /usr/bin/mailctl "$@"; }

step="version"
mailctl version >"$tmp/version.out" 2>&1 || fail "mailctl version: $(cat "$tmp/version.out")"
grep -qF "mailctl $version " "$tmp/version.out" || fail "version is not $version: $(head -n1 "$tmp/version.out")"

step="setup"
root=$tmp/root
# A port the kernel reports free now (as bench/lib.sh and internal/freeport
# pick theirs): a port derived from the PID could be one an outgoing
# connection already holds.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sock=$root/run/mailctl/mailctl.sock
mailctl setup --non-interactive --root "$root" --domain example.test --hostname mx.example.test \
	--self-signed --trusted-sender '*@example.org' --smtp-listen "127.0.0.1:$port" --socket "$sock" \
	>"$tmp/setup.out" 2>&1 || fail "$(cat "$tmp/setup.out")"
cfg=$root/etc/mailctl/config.toml
[ -f "$cfg" ] || fail "no config written"
ls "$root"/etc/mailctl/dkim/ed*.key "$root"/etc/mailctl/dkim/rsa*.key >/dev/null 2>&1 || fail "DKIM keys missing"
grep -q "_domainkey.example.test" "$tmp/setup.out" || fail "no DKIM record printed"
keysum=$(cat "$root"/etc/mailctl/dkim/*.key | sha256sum)
mailctl setup --non-interactive --root "$root" --domain example.test >"$tmp/setup2.out" 2>&1 || fail "re-run: $(cat "$tmp/setup2.out")"
[ "$(cat "$root"/etc/mailctl/dkim/*.key | sha256sum)" = "$keysum" ] || fail "re-running setup changed the keys"

step="serve"
# The binary itself, not the mailctl function above: a function put in the
# background runs in a subshell, $! is that shell's, and killing it left the
# daemon running after the script had ended.
/usr/bin/mailctl serve --config "$cfg" >"$tmp/serve.log" 2>&1 &
serve_pid=$!
answered=no
i=0
while [ $i -lt 50 ]; do
	if mailctl version --socket "$sock" 2>/dev/null | grep -q "^daemon: mailctl $version"; then
		answered=yes
		break
	fi
	kill -0 "$serve_pid" 2>/dev/null || break
	sleep 0.2
	i=$((i + 1))
done
[ $answered = yes ] || fail "the socket did not answer: $(tail -n 5 "$tmp/serve.log")"
smtp=absent
if command -v socat >/dev/null 2>&1; then
	if printf 'QUIT\r\n' | socat -T 3 - "TCP:127.0.0.1:$port" 2>/dev/null | grep -q '^220'; then
		smtp=answered
	fi
fi

step="mail"
mailctl mailboxes create agent --owner nobody --socket "$sock" >"$tmp/mb.out" 2>&1 || fail "mailboxes create: $(cat "$tmp/mb.out")"
inbox=$root/var/lib/mailctl/mailboxes/agent/inbox
[ -d "$inbox" ] || fail "no inbox folder for the new mailbox"
delivered=no
if [ $smtp = answered ] && command -v swaks >/dev/null 2>&1; then
	if swaks --server "127.0.0.1:$port" --to agent@example.test --from someone@example.org \
		--header "Subject: test-deb" --body "kept after removal" >"$tmp/swaks.log" 2>&1; then
		delivered=yes
	fi
fi
if [ $delivered = no ]; then
	# Without SMTP the message stands in as a file, which is what the store holds.
	printf '+++\nsubject = "test-deb"\n+++\nkept after removal\n' >"$inbox/test-deb.md"
fi

step="doctor"
mailctl doctor --config "$cfg" --socket "$sock" >"$tmp/doctor.out" 2>&1 || true
grep -q "daemon.up" "$tmp/doctor.out" || fail "doctor did not see the daemon: $(head -n 5 "$tmp/doctor.out")"

step="doctor as a user"
# A user other than root gets the daemon's findings, never "permission denied".
chmod 0755 "$tmp" "$root"
if command -v runuser >/dev/null 2>&1; then
	runuser -u nobody -- mailctl doctor --socket "$sock" >"$tmp/doctor-user.out" 2>&1 || true
	grep -q "checked by the daemon for you" "$tmp/doctor-user.out" || fail "user doctor: $(head -n 5 "$tmp/doctor-user.out")"
	if grep -qi "permission denied" "$tmp/doctor-user.out"; then
		fail "user doctor printed permission denied"
	fi
fi

step="stop"
kill "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
serve_pid=""
# Nothing this script started serves on: no daemon of this config is left.
if pgrep -f -- "serve --config $cfg" >/dev/null 2>&1; then
	fail "a mailctl serve of $cfg still runs after the stop: $(pgrep -af -- "serve --config $cfg")"
fi

step="remove"
# Stand-ins for real mail and keys in the system paths the package knows.
echo mail >/var/lib/mailctl/mailboxes/.test-deb-sentinel
echo key >/etc/mailctl/dkim/.test-deb-sentinel
dpkg -r mailctl >"$tmp/dpkg-r.log" 2>&1 || { cat "$tmp/dpkg-r.log" >&2; fail "dpkg -r"; }
[ ! -e /usr/bin/mailctl ] || fail "binary still installed"
dpkg -P mailctl >"$tmp/dpkg-p.log" 2>&1 || { cat "$tmp/dpkg-p.log" >&2; fail "dpkg -P"; }
[ -f /var/lib/mailctl/mailboxes/.test-deb-sentinel ] || fail "purge removed /var/lib/mailctl content"
[ -f /etc/mailctl/dkim/.test-deb-sentinel ] || fail "purge removed /etc/mailctl/dkim content"
[ "$(cat "$root"/etc/mailctl/dkim/*.key | sha256sum)" = "$keysum" ] || fail "keys changed"
ls "$inbox"/*.md >/dev/null 2>&1 || fail "mail is gone"
rm -f /var/lib/mailctl/mailboxes/.test-deb-sentinel /etc/mailctl/dkim/.test-deb-sentinel

step="reinstall after purge"
reinstalled=""
# The purge kept /etc/mailctl and took the unit's enablement: installing
# again must say how to bring the daemon back on the kept config.
if [ $etc_existed = no ]; then
	echo '# kept from an earlier install' >/etc/mailctl/config.toml
	dpkg -i "$deb" >"$tmp/dpkg-i2.log" 2>&1 || { cat "$tmp/dpkg-i2.log" >&2; fail "dpkg -i"; }
	grep -q "earlier install in /etc/mailctl; run \`sudo mailctl setup\`" "$tmp/dpkg-i2.log" || fail "postinst said nothing of the kept config: $(cat "$tmp/dpkg-i2.log")"
	grep -q "^# kept from an earlier install" /etc/mailctl/config.toml || fail "installing changed the kept config"
	dpkg -P mailctl >"$tmp/dpkg-p2.log" 2>&1 || { cat "$tmp/dpkg-p2.log" >&2; fail "dpkg -P"; }
	rm -f /etc/mailctl/config.toml
	reinstalled=", reinstalled onto the kept config (told to run setup)"
fi
if [ $etc_existed = no ]; then
	rmdir /etc/mailctl/dkim /etc/mailctl 2>/dev/null || true
	rmdir /var/lib/mailctl/mailboxes /var/lib/mailctl/registry /var/lib/mailctl/queue /var/lib/mailctl 2>/dev/null || true
fi

echo "test-deb: ok $(basename "$deb"): installed without starting, version $version, setup twice (keys kept), socket answered, smtp $smtp, mail via $( [ $delivered = yes ] && echo swaks || echo file), doctor ran (root and user), removed and purged with mail and keys kept$reinstalled"
