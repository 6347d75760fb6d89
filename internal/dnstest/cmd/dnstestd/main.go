// Command dnstestd serves a small zone file over DNS (UDP and TCP), for
// end-to-end tests that run mailctl in a network namespace.
//
//	go run ./internal/dnstest/cmd/dnstestd -listen 10.0.0.1:53 -zone zone.txt
//
// The zone format is one record per line, "name TYPE value" (A, AAAA, MX, TXT,
// or HANG/SERVFAIL with no value). SIGHUP reloads the file.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mailctl/mailctl/internal/dnstest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5353", "address to serve on (UDP and TCP)")
	zoneFile := flag.String("zone", "", "zone file (required)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *listen, *zoneFile); err != nil {
		fmt.Fprintln(os.Stderr, "dnstestd:", err)
		os.Exit(1)
	}
}

func load(path string) (dnstest.Zone, error) {
	f, err := os.Open(path)
	if err != nil {
		return dnstest.Zone{}, err
	}
	defer f.Close()
	return dnstest.ParseZone(f)
}

func run(log *slog.Logger, listen, zoneFile string) error {
	if zoneFile == "" {
		return fmt.Errorf("-zone is required")
	}
	// Catch signals before serving, so a SIGHUP sent as soon as the server
	// answers reloads instead of killing the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	z, err := load(zoneFile)
	if err != nil {
		return err
	}
	s, err := dnstest.Listen(listen, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Load(z)
	log.Info("serving", "addr", s.Addr(), "records", len(z.Records))

	for s2 := range sig {
		if s2 != syscall.SIGHUP {
			log.Info("stopping", "signal", s2.String())
			return nil
		}
		z, err := load(zoneFile)
		if err != nil {
			log.Error("reload failed, keeping the old zone", "err", err)
			continue
		}
		s.Load(z)
		log.Info("reloaded", "records", len(z.Records))
	}
	return nil
}
