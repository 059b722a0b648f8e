// Package shape_test keeps the controller's shape (issue 33): a line budget, no long functions,
// and docs/sync-path.md's claim that the controller decides nothing over the plan's fields.
package shape_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// lineBudget bounds internal/controller's product lines (its non-test .go files, every line):
// what does not fit is a job for a package of its own.
const lineBudget = 2300

// maxFunctionLines bounds one product function of internal/controller.
const maxFunctionLines = 80

// productFiles are internal/controller's non-test .go files.
func productFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// covers: (issue 33: internal/controller stays within its line budget)
func TestControllerLineBudget(t *testing.T) {
	lines := 0
	for _, f := range productFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines > lineBudget {
		t.Errorf("internal/controller has %d product lines, over its budget of %d: move a job into a package of its own", lines, lineBudget)
	}
}

// covers: (issue 33: no product function of internal/controller over 80 lines)
func TestControllerFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	for _, f := range productFiles(t) {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFunctionLines {
					t.Errorf("%s: %s is %d lines, over %d", fset.Position(fd.Pos()), fd.Name.Name, n, maxFunctionLines)
				}
			}
		}
	}
}

// covers: (docs/sync-path.md: "no condition combines plan fields" in the controller)
// The model decides; the controller reads its decisions. A condition over two fields of a
// model.ServicePlan (sp.A && !sp.B) would be a rule decided in the controller: put it in the
// model (model/writes.go: Before, After) and read the result.
func TestControllerCombinesNoPlanFields(t *testing.T) {
	dirs := []string{".."}
	subs, err := filepath.Glob("../*/")
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, subs...)
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || filepath.Base(dir) == "shape" {
			continue
		}
		checkPlanConditions(t, dir)
	}
}

// checkPlanConditions type-checks the product files of the package in dir and reports every
// condition that reads two or more fields of a model.ServicePlan.
func checkPlanConditions(t *testing.T, dir string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: exportImporter(t, fset, dir)}
	if _, err := conf.Check(files[0].Name.Name, fset, files, info); err != nil {
		t.Fatalf("type-checking %s: %v", dir, err)
	}
	planFields := func(e ast.Expr) map[string]bool {
		fields := map[string]bool{}
		ast.Inspect(e, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if s := info.Selections[sel]; s != nil && s.Kind() == types.FieldVal && isServicePlan(s.Recv()) {
				fields[sel.Sel.Name] = true
			}
			return true
		})
		return fields
	}
	reported := map[token.Pos]bool{}
	check := func(e ast.Expr) {
		if e == nil || reported[e.Pos()] {
			return
		}
		reported[e.Pos()] = true
		if fields := planFields(e); len(fields) > 1 {
			t.Errorf("%s: a condition over ServicePlan fields %v is decided in the controller; let the model decide it", fset.Position(e.Pos()), keys(fields))
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.IfStmt:
				check(n.Cond)
			case *ast.ForStmt:
				check(n.Cond)
			case *ast.CaseClause:
				for _, e := range n.List {
					check(e)
				}
			case *ast.BinaryExpr:
				if n.Op == token.LAND || n.Op == token.LOR {
					check(n)
					return false // its operands are part of this condition
				}
			}
			return true
		})
	}
}

func isServicePlan(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Name() == "ServicePlan" && n.Obj().Pkg() != nil && strings.HasSuffix(n.Obj().Pkg().Path(), "/internal/model")
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// exportImporter imports the dependencies of the package in dir from the compiler's export data
// (go list -export): the build cache has it, so nothing is type-checked twice.
func exportImporter(t *testing.T, fset *token.FileSet, dir string) types.Importer {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export in %s: %v", dir, err)
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
}
