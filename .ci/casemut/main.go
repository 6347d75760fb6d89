// Command casemut mutates what gremlins leaves alone: the conditions of the
// case clauses of expression-less switch statements. gremlins mutates only
// code inside Go's coverage blocks, and a case clause's condition is not in
// one, so it reports those mutants as not covered and never runs them; yet
// such switches hold decisions (who may change a mailbox, which From a
// message has). casemut applies gremlins' operator mutators to them, runs
// the package's tests against each mutant through `go test -overlay` (the
// source tree is never written), and writes the results in gremlins' JSON
// report format for .ci/mutation-report.py.
//
// Usage: go run ./.ci/casemut -dir PKGDIR -o REPORT.json [-workers N] [FILE...]
// FILEs are names in PKGDIR; without any, every non-test file of it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// mutators maps an operator to its mutations, by gremlins' mutator names.
var mutators = map[token.Token][]struct {
	kind string
	to   token.Token
}{
	token.LSS:  {{"CONDITIONALS_BOUNDARY", token.LEQ}, {"CONDITIONALS_NEGATION", token.GEQ}},
	token.LEQ:  {{"CONDITIONALS_BOUNDARY", token.LSS}, {"CONDITIONALS_NEGATION", token.GTR}},
	token.GTR:  {{"CONDITIONALS_BOUNDARY", token.GEQ}, {"CONDITIONALS_NEGATION", token.LEQ}},
	token.GEQ:  {{"CONDITIONALS_BOUNDARY", token.GTR}, {"CONDITIONALS_NEGATION", token.LSS}},
	token.EQL:  {{"CONDITIONALS_NEGATION", token.NEQ}},
	token.NEQ:  {{"CONDITIONALS_NEGATION", token.EQL}},
	token.LAND: {{"INVERT_LOGICAL", token.LOR}},
	token.LOR:  {{"INVERT_LOGICAL", token.LAND}},
	token.ADD:  {{"ARITHMETIC_BASE", token.SUB}},
	token.SUB:  {{"ARITHMETIC_BASE", token.ADD}},
	token.MUL:  {{"ARITHMETIC_BASE", token.QUO}},
	token.QUO:  {{"ARITHMETIC_BASE", token.MUL}},
	token.REM:  {{"ARITHMETIC_BASE", token.MUL}},
}

type mutant struct {
	file         string // name in the package directory
	offset       int    // of the operator
	from, to     token.Token
	kind         string
	line, column int
	status       string
}

// Report is gremlins' JSON report format, the part the report script reads.
type Report struct {
	Files []ReportFile `json:"files"`
}

// ReportFile is one file of a Report.
type ReportFile struct {
	Name      string     `json:"file_name"`
	Mutations []Mutation `json:"mutations"`
}

// Mutation is one mutant of a ReportFile.
type Mutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// goCmd is the go command the tests run with.
var goCmd = "go"

func main() {
	dir := flag.String("dir", "", "package directory, relative to the module root")
	out := flag.String("o", "", "report to write")
	workers := flag.Int("workers", 1, "mutants tested at once")
	coef := flag.Int("timeout-coefficient", 5, "a mutant's test run may take this many times the unmutated run")
	also := flag.String("also", "", "more packages whose tests run against each mutant, separated by spaces")
	flag.StringVar(&goCmd, "go", "go", "the go command that runs the tests (by path: `go run` puts Go's own bin first on PATH)")
	flag.Parse()
	if *dir == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: casemut -dir PKGDIR -o REPORT.json [-workers N] [-also PKGS] [-go GO] [FILE...]")
		os.Exit(2)
	}
	if err := run(*dir, *out, flag.Args(), *also, *workers, *coef); err != nil {
		fmt.Fprintln(os.Stderr, "casemut:", err)
		os.Exit(1)
	}
}

func run(dir, out string, files []string, also string, workers, coef int) error {
	if len(files) == 0 {
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			return err
		}
		for _, n := range names {
			if !strings.HasSuffix(n, "_test.go") {
				files = append(files, filepath.Base(n))
			}
		}
	}
	var mutants []*mutant
	for _, f := range files {
		ms, err := find(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		for _, m := range ms {
			m.file = f
		}
		mutants = append(mutants, ms...)
	}
	// The packages whose tests judge a mutant, separated by spaces.
	pkg := strings.TrimSpace("./" + filepath.ToSlash(dir) + " " + also)
	start := time.Now()
	// The unmutated run shows its output: when it fails, that is what to read.
	base := exec.Command(goCmd, append([]string{"test", "-count=1"}, strings.Fields(pkg)...)...)
	base.Stdout, base.Stderr = os.Stdout, os.Stderr
	if err := base.Run(); err != nil {
		return fmt.Errorf("the tests of %s fail without a mutant: %w", pkg, err)
	}
	timeout := time.Duration(coef) * time.Since(start)
	tmp, err := os.MkdirTemp("", "casemut")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	next := make(chan *mutant)
	var wg sync.WaitGroup
	for w := range max(workers, 1) {
		wg.Go(func() {
			for m := range next {
				m.status = test(m, dir, pkg, filepath.Join(tmp, fmt.Sprint(w)), timeout)
				fmt.Printf("%12s %s at %s:%d:%d\n", m.status, m.kind, m.file, m.line, m.column)
			}
		})
	}
	for _, m := range mutants {
		next <- m
	}
	close(next)
	wg.Wait()
	return write(out, mutants)
}

// find lists the mutants of the case conditions of expression-less switches
// in path.
func find(path string) ([]*mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []*mutant
	ast.Inspect(f, func(n ast.Node) bool {
		sw, ok := n.(*ast.SwitchStmt)
		if !ok || sw.Tag != nil {
			return true
		}
		for _, st := range sw.Body.List {
			for _, e := range st.(*ast.CaseClause).List {
				ast.Inspect(e, func(n ast.Node) bool {
					if _, lit := n.(*ast.FuncLit); lit {
						return false // a function's body is in a coverage block
					}
					b, ok := n.(*ast.BinaryExpr)
					if !ok {
						return true
					}
					pos := fset.Position(b.OpPos)
					for _, mu := range mutators[b.Op] {
						out = append(out, &mutant{offset: pos.Offset, from: b.Op, to: mu.to, kind: mu.kind, line: pos.Line, column: pos.Column})
					}
					return true
				})
			}
		}
		return true
	})
	return out, nil
}

// test runs the package's tests with m applied and says what became of it,
// in gremlins' words.
func test(m *mutant, dir, pkg, work string, timeout time.Duration) string {
	src := filepath.Join(dir, m.file)
	data, err := os.ReadFile(src)
	if err != nil {
		return "NOT VIABLE"
	}
	op := m.from.String()
	if !bytes.HasPrefix(data[m.offset:], []byte(op)) {
		return "NOT VIABLE"
	}
	mutated := append(append(append([]byte{}, data[:m.offset]...), m.to.String()...), data[m.offset+len(op):]...)
	if err := os.MkdirAll(work, 0o700); err != nil {
		return "NOT VIABLE"
	}
	abs, _ := filepath.Abs(src)
	file := filepath.Join(work, m.file)
	overlay := filepath.Join(work, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: file}})
	if os.WriteFile(file, mutated, 0o600) != nil || os.WriteFile(overlay, ov, 0o600) != nil {
		return "NOT VIABLE"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = goTest(ctx, pkg, overlay, timeout)
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "TIMED OUT"
	case err == nil:
		return "LIVED"
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return "KILLED"
	}
	return "NOT VIABLE"
}

// goTest runs the tests of pkg with the mutant's overlay. A run that
// outlasts timeout is killed with everything it started: the go command,
// the wrapper before it (.ci/mutation-go), the test binaries and their
// children, all in one process group of their own. Killing the go command
// alone would leave its test binary running (to Go's default timeout of
// ten minutes), taking the CPU from the mutants after it. The test binary
// also ends itself a little after timeout, should anything escape the
// group.
func goTest(ctx context.Context, pkg, overlay string, timeout time.Duration) error {
	args := []string{"test", "-count=1", "-failfast", "-timeout", (timeout + 2*time.Second).String()}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.CommandContext(ctx, goCmd, append(args, strings.Fields(pkg)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd.Run()
}

func write(path string, mutants []*mutant) error {
	byFile := map[string][]Mutation{}
	for _, m := range mutants {
		byFile[m.file] = append(byFile[m.file], Mutation{Type: m.kind, Status: m.status, Line: m.line, Column: m.column})
	}
	var r Report
	for f, ms := range byFile {
		r.Files = append(r.Files, ReportFile{Name: f, Mutations: ms})
	}
	sort.Slice(r.Files, func(i, j int) bool { return r.Files[i].Name < r.Files[j].Name })
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
