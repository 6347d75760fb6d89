package dnstest

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Zone is a parsed zone file: records, plus the names that should never be
// answered and those that answer SERVFAIL.
type Zone struct {
	Records  []Record
	Hang     []string
	ServFail []string
}

// ParseZone reads the simple zone format of dnstestd: one record per line,
// "name TYPE value", where TYPE is A, AAAA, MX, TXT, or HANG / SERVFAIL (no
// value) to make name time out or fail. A TXT value is the rest of the line;
// surrounding double quotes are removed. Blank lines and lines starting with
// '#' are skipped.
func ParseZone(r io.Reader) (Zone, error) {
	var z Zone
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest := cutField(line)
		typ, value := cutField(rest)
		typ = strings.ToUpper(typ)
		switch typ {
		case "HANG":
			z.Hang = append(z.Hang, name)
			continue
		case "SERVFAIL":
			z.ServFail = append(z.ServFail, name)
			continue
		case "TXT":
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
		}
		rec := Record{Name: name, Type: typ, Value: value}
		if err := rec.validate(); err != nil {
			return z, fmt.Errorf("zone line %d: %w", n, err)
		}
		z.Records = append(z.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return z, fmt.Errorf("zone: %w", err)
	}
	return z, nil
}

// Load replaces the server's zone with z, including its HANG and SERVFAIL
// names.
func (s *Server) Load(z Zone) {
	s.Replace(z.Records)
	s.mu.Lock()
	s.hang, s.servfail = map[string]bool{}, map[string]bool{}
	s.mu.Unlock()
	for _, n := range z.Hang {
		s.Hang(n, true)
	}
	for _, n := range z.ServFail {
		s.ServFail(n, true)
	}
}

// cutField splits off the first whitespace-separated word.
func cutField(s string) (word, rest string) {
	s = strings.TrimLeft(s, " \t")
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}
