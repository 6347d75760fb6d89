package agentcfg

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// goose keeps extensions in ~/.config/goose/config.yaml as a block mapping:
//
//	extensions:
//	  mailctl:
//	    enabled: true
//	    type: stdio
//	    ...
//
// No YAML library is in the module, so the file is edited as text: our block
// under `extensions:` is replaced or inserted, everything else is kept byte
// for byte. Scalars are written as JSON strings, which are valid YAML
// double-quoted scalars (see quote).

// gooseBlock renders our extension entry with the given indentation.
func gooseBlock(s Server, indent string) string {
	var b strings.Builder
	in := indent + "  "
	fmt.Fprintf(&b, "%s%s:\n", indent, ServerName)
	fmt.Fprintf(&b, "%senabled: true\n", in)
	fmt.Fprintf(&b, "%stype: stdio\n", in)
	fmt.Fprintf(&b, "%sname: %s\n", in, ServerName)
	fmt.Fprintf(&b, "%sdescription: %s\n", in, quote("Mail: mailboxes, email and hooks through the mailctl daemon"))
	fmt.Fprintf(&b, "%scmd: %s\n", in, quote(s.Command))
	fmt.Fprintf(&b, "%sargs: [%s]\n", in, quoteList(s.Args))
	if len(s.Env) == 0 {
		fmt.Fprintf(&b, "%senvs: {}\n", in)
	} else {
		fmt.Fprintf(&b, "%senvs:\n", in)
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			fmt.Fprintf(&b, "%s  %s: %s\n", in, quote(k), quote(s.Env[k]))
		}
	}
	fmt.Fprintf(&b, "%stimeout: %d\n", in, ToolTimeoutSecs)
	return b.String()
}

func gooseSnippet(s Server) ([]byte, error) {
	return []byte("extensions:\n" + gooseBlock(s, "  ")), nil
}

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

func blankOrComment(line string) bool {
	t := strings.TrimSpace(line)
	return t == "" || strings.HasPrefix(t, "#")
}

// gooseMerge puts our block under the top-level extensions mapping.
func gooseMerge(existing []byte, s Server) ([]byte, error) {
	text := string(existing)
	if strings.Contains(text, "\t") {
		return nil, fmt.Errorf("the goose config contains tabs: add the snippet from --print by hand")
	}
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	ext, err := gooseExtensionsLine(lines)
	if err != nil {
		return nil, err
	}
	if ext < 0 {
		// No extensions yet: the mapping starts, empty, at the end.
		if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
			lines[n-1] += "\n"
		}
		lines, ext = append(lines, "extensions:\n"), len(lines)
	}
	end, indent, err := gooseExtensionsEnd(lines, ext)
	if err != nil {
		return nil, err
	}
	block := ""
	if s.Command != "" {
		block = gooseBlock(s, indent)
	}
	var out strings.Builder
	out.WriteString(strings.Join(lines[:ext+1], ""))
	if !gooseReplaceEntry(&out, lines[ext+1:end], indent, block) {
		if s.Command == "" {
			return existing, nil
		}
		if !strings.HasSuffix(out.String(), "\n") {
			out.WriteString("\n")
		}
		out.WriteString(block)
	}
	out.WriteString(strings.Join(lines[end:], ""))
	return []byte(out.String()), nil
}

// gooseExtensionsLine finds the top-level `extensions:` line (-1 when there
// is none), turning an empty inline `extensions: {}` into a block mapping.
func gooseExtensionsLine(lines []string) (int, error) {
	for i, l := range lines {
		if !strings.HasPrefix(l, "extensions:") {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(l, "extensions:"))
		switch {
		case rest == "{}":
			lines[i] = "extensions:\n"
		case rest != "" && !strings.HasPrefix(rest, "#"):
			return -1, fmt.Errorf("goose's extensions are written inline (%s): add the snippet from --print by hand", rest)
		}
		return i, nil
	}
	return -1, nil
}

// gooseExtensionsEnd returns where the extensions block that starts at line
// ext ends (the next line indented at column 0) and its entries' indentation.
func gooseExtensionsEnd(lines []string, ext int) (end int, indent string, err error) {
	for i := ext + 1; i < len(lines); i++ {
		if blankOrComment(lines[i]) {
			continue
		}
		if indentOf(lines[i]) == 0 {
			return i, cmp.Or(indent, "  "), nil
		}
		if indent == "" {
			indent = strings.Repeat(" ", indentOf(lines[i]))
		}
		if indentOf(lines[i]) < len(indent) {
			return 0, "", fmt.Errorf("goose's extensions are indented unevenly: add the snippet from --print by hand")
		}
	}
	return len(lines), cmp.Or(indent, "  "), nil
}

// gooseReplaceEntry copies the extensions block's lines to out with our entry
// (its key and everything indented under it) replaced by block, and says
// whether our entry was there.
func gooseReplaceEntry(out *strings.Builder, body []string, indent, block string) bool {
	found := false
	for i := 0; i < len(body); i++ {
		l := body[i]
		if blankOrComment(l) || indentOf(l) != len(indent) || strings.TrimSpace(l) != ServerName+":" {
			out.WriteString(l)
			continue
		}
		out.WriteString(block)
		found = true
		for i+1 < len(body) && (blankOrComment(body[i+1]) || indentOf(body[i+1]) > len(indent)) {
			i++
		}
	}
	return found
}

// gooseWired finds our entry under extensions and its cmd.
func gooseWired(existing []byte) (bool, string) {
	lines := strings.Split(string(existing), "\n")
	inExt, inOurs, oursIndent := false, false, 0
	found, child := false, 0
	for _, l := range lines {
		if blankOrComment(l) {
			continue
		}
		ind := indentOf(l)
		t := strings.TrimSpace(l)
		if ind == 0 {
			inExt = strings.HasPrefix(l, "extensions:")
			inOurs, child = false, 0
			continue
		}
		if !inExt {
			continue
		}
		if child == 0 {
			child = ind
		}
		if t == ServerName+":" && ind == child {
			inOurs, oursIndent, found = true, ind, true
			continue
		}
		if inOurs && ind <= oursIndent {
			inOurs = false
		}
		if inOurs && strings.HasPrefix(t, "cmd:") {
			v := strings.TrimSpace(strings.TrimPrefix(t, "cmd:"))
			var s string
			if json.Unmarshal([]byte(v), &s) == nil {
				return true, s
			}
			return true, strings.Trim(v, "'\"")
		}
	}
	return found, ""
}
