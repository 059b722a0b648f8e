// Command schemas writes the OVN NB and SB database schemas that kube-ovn v1.16.2's models were
// generated from, so the lab and the tests create their databases (ovsdb-tool create) exactly as
// kube-ovn-controller expects them. It reads the schema literal from kube-ovn's generated model
// sources in the module cache (libovsdb's own marshalling would corrupt it: it writes every
// maxLength as minLength too). The one change: ACL.name loses its "minLength": 63, which would
// reject every shorter ACL name.
//
// Usage: go run ./schemas KUBE_OVN_MODULE_DIR OUTDIR
package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: schemas KUBE_OVN_MODULE_DIR OUTDIR")
		os.Exit(2)
	}
	for _, db := range []string{"ovnnb", "ovnsb"} {
		if err := write(filepath.Join(os.Args[1], "pkg", "ovsdb", db, "model.go"), filepath.Join(os.Args[2], db+".ovsschema")); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", db, err)
			os.Exit(1)
		}
	}
}

func write(src, dst string) error {
	literal, err := schemaLiteral(src)
	if err != nil {
		return err
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(literal), &schema); err != nil {
		return fmt.Errorf("decoding the schema in %s: %w", src, err)
	}
	if key, ok := dig(schema, "tables", "ACL", "columns", "name", "type", "key").(map[string]any); ok {
		delete(key, "minLength")
	}
	out, err := json.MarshalIndent(schema, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(dst, append(out, '\n'), 0o644)
}

// schemaLiteral returns the value of the package-level `var schema = "..."` in a generated model file.
func schemaLiteral(src string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", src, err)
	}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if len(vs.Names) == 1 && vs.Names[0].Name == "schema" && len(vs.Values) == 1 {
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					return strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return "", fmt.Errorf("no schema literal in %s", src)
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}
