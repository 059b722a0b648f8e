// Command figures prints the design figures of the controller's shape (issue "The controller
// back in shape"), read from the source with go/ast so that any commit can be measured the same
// way:
//
//	go -C hack/tools/figures run . -repo "$PWD"
//
// It prints the product lines of internal/controller (the package, and the tree with its
// subpackages), the longest and most complex per-gateway sync function, the functions of 80
// lines or more (product, and the rest), and the fields and methods of the gateway reconciler.
// Product is what .golangci.yml holds to funlen and gocyclo: the shipped binaries' packages.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// product is .golangci.yml's path-except for funlen and gocyclo.
var product = regexp.MustCompile(`^(cmd/(vpcgw|vpcgw-agent|kubectl-vpcgw)/|api/|internal/(controller|model|dataplane|gwstate|ovn|webhook|inspect|status|cli|version|scheme|release)/|internal/transport/([^/]+\.go$|lineio/))`)

type function struct {
	file, name  string
	lines, cycl int
}

func main() {
	repo := flag.String("repo", ".", "the checkout to measure")
	flag.Parse()
	if err := run(*repo); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

func run(repo string) error {
	var funcs []function
	ctlPkg, ctlTree := 0, 0
	fields, methods := map[string]int{}, map[string]int{}
	methodFiles := map[string]map[string]bool{}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		if d.IsDir() {
			if strings.HasPrefix(rel, "hack") || strings.HasPrefix(rel, ".") && rel != "." || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(src), "Code generated") || strings.Contains(string(src), "DO NOT EDIT") {
			return nil
		}
		n := strings.Count(string(src), "\n")
		if filepath.Dir(rel) == "internal/controller" {
			ctlPkg += n
		}
		if strings.HasPrefix(rel, "internal/controller/") {
			ctlTree += n
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					recv := typeName(d.Recv.List[0].Type)
					name = recv + "." + name
					if strings.HasPrefix(rel, "internal/controller/") {
						methods[recv]++
						if methodFiles[recv] == nil {
							methodFiles[recv] = map[string]bool{}
						}
						methodFiles[recv][rel] = true
					}
				}
				lines := fset.Position(d.End()).Line - fset.Position(d.Pos()).Line + 1
				funcs = append(funcs, function{file: rel, name: name, lines: lines, cycl: cyclomatic(d.Body)})
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok || !strings.HasPrefix(rel, "internal/controller/") {
						continue
					}
					if st, ok := ts.Type.(*ast.StructType); ok {
						for _, fl := range st.Fields.List {
							fields[ts.Name.Name] += max(1, len(fl.Names))
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	report(funcs, ctlPkg, ctlTree, fields, methods, methodFiles)
	return nil
}

func report(funcs []function, ctlPkg, ctlTree int, fields, methods map[string]int, methodFiles map[string]map[string]bool) {
	fmt.Printf("internal/controller product lines: %d (the package), %d (with its subpackages)\n", ctlPkg, ctlTree)
	for _, f := range funcs {
		if f.file == "internal/controller/reconcile.go" || strings.HasPrefix(f.file, "internal/controller/") && strings.HasSuffix(f.name, ".sync") {
			if strings.HasSuffix(f.name, ".sync") || strings.HasSuffix(f.name, ".Reconcile") {
				fmt.Printf("  %s (%s): %d lines, cyclomatic %d\n", f.name, f.file, f.lines, f.cycl)
			}
		}
	}
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].lines > funcs[j].lines })
	var long, longProduct int
	for _, f := range funcs {
		if f.lines < 80 {
			break
		}
		long++
		if product.MatchString(f.file) {
			longProduct++
			fmt.Printf("  product function of %d lines: %s (%s)\n", f.lines, f.name, f.file)
		}
	}
	fmt.Printf("functions of 80 lines or more (non-test): %d, of which %d in the product\n", long, longProduct)
	var over15 int
	for _, f := range funcs {
		if product.MatchString(f.file) && f.cycl > 15 {
			over15++
		}
	}
	fmt.Printf("product functions of cyclomatic complexity over 15: %d\n", over15)
	for _, t := range []string{"GatewayReconciler"} {
		fmt.Printf("%s: %d fields, %d methods in %d files\n", t, fields[t], methods[t], len(methodFiles[t]))
	}
}

// typeName is a receiver's type name without pointer or type parameters.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// cyclomatic is gocyclo's count: 1, plus one for each if, for, range, non-default case and
// select clause, and each && and ||.
func cyclomatic(body *ast.BlockStmt) int {
	c := 1
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
