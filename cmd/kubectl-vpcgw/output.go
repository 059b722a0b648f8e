package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// The -o formats a verb offers besides json and yaml and the templates, which every verb has.
type outputSpec struct {
	name          bool // -o name
	customColumns bool // -o custom-columns=..., -o custom-columns-file=...
	wide          bool // -o wide (the text with more columns)
	noHeaders     bool // --no-headers (the tables: the text and custom-columns)
}

// output is one verb's -o and the flags that go with it, as kubectl's (k8s.io/cli-runtime's
// PrintFlags: json, yaml, kyaml, name, go-template[-file], template[file], jsonpath[-file],
// jsonpath-as-json, --template, --allow-missing-template-keys), plus custom-columns, wide and
// --no-headers, which kubectl implements outside cli-runtime.
type output struct {
	format    *string
	spec      outputSpec
	flags     *genericclioptions.PrintFlags
	noHeaders bool

	// Set by complete: the printer, or the custom columns, or neither (the text for a person).
	printer printers.ResourcePrinter
	columns []column
}

func (o *options) addOutputFlags(cmd *cobra.Command, spec outputSpec) *output {
	out := &output{format: &o.output, spec: spec, flags: &genericclioptions.PrintFlags{
		OutputFormat:         &o.output,
		JSONYamlPrintFlags:   genericclioptions.NewJSONYamlPrintFlags(),
		TemplatePrinterFlags: genericclioptions.NewKubeTemplatePrintFlags(),
	}}
	if spec.name {
		out.flags.NamePrintFlags = genericclioptions.NewNamePrintFlags("")
	}
	formats := out.allowed()
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format. One of: ("+strings.Join(formats, ", ")+"). Default: a table or text for a person.")
	out.flags.OutputFlagSpecified = func() bool { return cmd.Flag("output").Changed }
	out.flags.TemplatePrinterFlags.AddFlags(cmd)
	if spec.noHeaders {
		cmd.Flags().BoolVar(&out.noHeaders, "no-headers", false, "Don't print column headers (the default table, -o wide and -o custom-columns)")
	}
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace))
	return out
}

// allowed are the -o values, in the order the help and the errors give them.
func (out *output) allowed() []string {
	formats := append([]string{}, out.flags.JSONYamlPrintFlags.AllowedFormats()...)
	if out.spec.name {
		formats = append(formats, out.flags.NamePrintFlags.AllowedFormats()...)
	}
	formats = append(formats, out.flags.TemplatePrinterFlags.AllowedFormats()...)
	if out.spec.customColumns {
		formats = append(formats, "custom-columns", "custom-columns-file")
	}
	if out.spec.wide {
		formats = append(formats, "wide")
	}
	return formats
}

// complete checks -o (and its template or columns) before the verb reads the cluster: a bad
// one is a usage error.
func (out *output) complete() error {
	f := *out.format
	tmpl := out.flags.TemplatePrinterFlags.TemplateArgument
	switch {
	case f == "" && (tmpl == nil || *tmpl == ""):
		return nil
	case f == "wide" && out.spec.wide:
		return nil
	case out.spec.customColumns && (strings.HasPrefix(f, "custom-columns=") || strings.HasPrefix(f, "custom-columns-file=") || f == "custom-columns" || f == "custom-columns-file"):
		cols, err := parseCustomColumns(f)
		if err != nil {
			return usageError{err}
		}
		out.columns = cols
		return nil
	}
	p, err := out.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return usagef("unable to match a printer suitable for the output format %q, allowed formats are: %s", f, strings.Join(out.allowed(), ","))
	}
	if err != nil {
		return usageError{err}
	}
	out.printer = p
	return nil
}

// text: -o is empty or wide (the verb prints for a person).
func (out *output) text() bool { return out.printer == nil && out.columns == nil }

func (out *output) wide() bool { return *out.format == "wide" }

// print writes doc as -o asks. text prints it for a person; names is what -o name lists (only
// for verbs with name). Lists (a document with items) give custom-columns a row per item.
func (out *output) print(w io.Writer, doc any, text func(io.Writer) error, names func() runtime.Object) error {
	if out.text() {
		return text(w)
	}
	if *out.format == "name" && names != nil {
		return out.printer.PrintObj(names(), w)
	}
	u, err := toUnstructured(doc)
	if err != nil {
		return err
	}
	if out.columns != nil {
		rows := []any{u.Object}
		if items, ok := u.Object["items"].([]any); ok {
			rows = items
		}
		return printColumns(w, out.columns, rows, out.noHeaders)
	}
	return out.printer.PrintObj(u, w)
}

// toUnstructured is doc as a runtime.Object, with its JSON field names (apiVersion and kind
// included, SPEC O2).
func toUnstructured(doc any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, err
	}
	return u, nil
}

// ref is an object -o name lists.
func ref(apiVersion, kind, namespace, name string) unstructured.Unstructured {
	u := unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func refList(items ...unstructured.Unstructured) runtime.Object {
	l := &unstructured.UnstructuredList{Items: items}
	l.SetAPIVersion("v1")
	l.SetKind("List")
	return l
}

// A column of -o custom-columns: its header and its JSONPath, as kubectl's.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseCustomColumns reads -o custom-columns=HEADER:.path,... or -o custom-columns-file=<file>
// (a line of headers and a line of paths, separated by white space), as kubectl does.
func parseCustomColumns(format string) ([]column, error) {
	kind, value, _ := strings.Cut(format, "=")
	var headers, paths []string
	switch kind {
	case "custom-columns":
		if value == "" {
			return nil, fmt.Errorf("custom-columns format specified but no custom columns given")
		}
		for _, part := range strings.Split(value, ",") {
			spec := strings.Split(part, ":")
			if len(spec) != 2 || spec[0] == "" {
				return nil, fmt.Errorf("unexpected custom-columns spec: %s, expected <header>:<json-path-expr>", part)
			}
			headers, paths = append(headers, spec[0]), append(paths, spec[1])
		}
	case "custom-columns-file":
		if value == "" {
			return nil, fmt.Errorf("custom-columns-file format specified but no file given")
		}
		data, err := os.ReadFile(value)
		if err != nil {
			return nil, fmt.Errorf("error reading template %s: %v", value, err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 2 {
			return nil, fmt.Errorf("custom-columns file %s: expected a line of headers and a line of paths, got %d lines", value, len(lines))
		}
		headers, paths = strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(headers) != len(paths) {
			return nil, fmt.Errorf("custom-columns file %s: %d headers but %d paths", value, len(headers), len(paths))
		}
	}
	cols := make([]column, 0, len(headers))
	for i, h := range headers {
		expr, err := relaxedJSONPath(paths[i])
		if err != nil {
			return nil, fmt.Errorf("custom-columns %s: %w", h, err)
		}
		jp := jsonpath.New(h).AllowMissingKeys(true)
		if err := jp.Parse(expr); err != nil {
			return nil, fmt.Errorf("custom-columns %s: %w", h, err)
		}
		cols = append(cols, column{header: h, path: jp})
	}
	return cols, nil
}

var relaxedPath = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// relaxedJSONPath accepts name1.name2, .name1.name2, {name1.name2} and {.name1.name2}, as
// kubectl's custom-columns do.
func relaxedJSONPath(p string) (string, error) {
	m := relaxedPath.FindStringSubmatch(p)
	if m == nil {
		return "", fmt.Errorf("unexpected path string %q, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'", p)
	}
	field := m[1]
	if field == "" {
		field = m[2]
	}
	return "{." + field + "}", nil
}

func printColumns(w io.Writer, cols []column, rows []any, noHeaders bool) error {
	tw := printers.GetNewTabWriter(w)
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = c.header
		}
		if _, err := fmt.Fprintln(tw, strings.Join(headers, "\t")); err != nil {
			return fmt.Errorf("write column headers: %w", err)
		}
	}
	for _, row := range rows {
		cells := make([]string, len(cols))
		for i, c := range cols {
			results, err := c.path.FindResults(row)
			if err != nil {
				return err
			}
			var values []string
			for _, rs := range results {
				for _, r := range rs {
					values = append(values, fmt.Sprintf("%v", r.Interface()))
				}
			}
			cells[i] = "<none>"
			if len(values) > 0 {
				cells[i] = strings.Join(values, ",")
			}
		}
		if _, err := fmt.Fprintln(tw, strings.Join(cells, "\t")); err != nil {
			return fmt.Errorf("write row: %w", err)
		}
	}
	return tw.Flush()
}
