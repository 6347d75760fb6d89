package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The profile table of bench/outbound.sh (and of any other bench script)
// finds its rows by function name in `perf report`; a renamed function would
// leave its row at 0% without a word.
// Every row must name a function that exists: one of this module, or one of
// the few outside it listed here.
func TestBenchProfileRowsNameFunctions(t *testing.T) {
	scripts, _ := filepath.Glob("../../bench/*.sh")
	var rows []string
	for _, path := range scripts {
		script, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range regexp.MustCompile(`split\("([^"]*)"`).FindAllSubmatch(script, -1) {
			rows = append(rows, strings.Split(string(table[1]), ";")...)
		}
	}
	if len(rows) == 0 {
		t.Fatal("bench/*.sh: no profile row table (split(\"symbol|label;...\")) found")
	}
	outside := map[string]bool{
		"dkim.NewSigner":         true, // github.com/emersion/go-msgauth/dkim
		"syscall.Fsync":          true,
		"unix.Syncfs":            true, // golang.org/x/sys/unix
		"runtime.gcBgMarkWorker": true,
	}
	have := moduleFuncs(t, "../..")
	closure := regexp.MustCompile(`(\.func\d+)+$`)
	for _, row := range rows {
		sym, _, _ := strings.Cut(row, "|")
		if fn := closure.ReplaceAllString(sym, ""); !outside[fn] && !have[fn] {
			t.Errorf("bench/ profiles %s, which names no function of this module", sym)
		}
	}
}

// moduleFuncs lists the functions and methods of the module's non-test Go
// files as perf names them: pkg.Func, pkg.(*T).Method or pkg.T.Method.
func moduleFuncs(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := f.Name.Name + "." + fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = f.Name.Name + "." + receiver(fd.Recv.List[0].Type) + "." + fd.Name.Name
			}
			out[name] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// receiver is a method's receiver type as perf writes it: (*T) or T.
func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return "(*" + receiver(e.X) + ")"
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.IndexListExpr:
		return receiver(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}
