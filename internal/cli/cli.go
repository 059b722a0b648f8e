// Package cli is what every vpcgw command line shares: readable help that exits 0, usage errors
// that point at it, and the usual logging flags (-v, --log-format).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// ErrHelp is returned by Parse after it printed the help that was asked for: not a failure.
var ErrHelp = errors.New("help requested")

// UsageError is a command line that cannot be parsed (exit code 2, as flag's own).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Parse parses args into fs. With -h, -help or --help it prints the help of command (e.g.
// "vpcgw controller") to stdout and returns ErrHelp; a bad command line is a *UsageError that
// says where the help is.
func Parse(fs *flag.FlagSet, args []string, command, description string, stdout io.Writer) error {
	fs.SetOutput(io.Discard) // flag's own usage text names types from backquotes; ours is below
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if err := PrintHelp(stdout, fs, command, description); err != nil {
			return fmt.Errorf("print the help of %s: %w", command, err)
		}
		return ErrHelp
	case err != nil:
		return &UsageError{fmt.Errorf("%w (see %s --help)", err, command)}
	case fs.NArg() > 0:
		return &UsageError{fmt.Errorf("unexpected arguments %q (see %s --help)", fs.Args(), command)}
	}
	return nil
}

// PrintHelp writes command's description and every flag of fs, sorted, with its type and default.
func PrintHelp(w io.Writer, fs *flag.FlagSet, command, description string) error {
	var b strings.Builder // written at once: one error to check
	fmt.Fprintf(&b, "Usage: %s [flags]\n\n%s\n\nFlags:\n", command, strings.TrimSpace(description))
	var all []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { all = append(all, f) })
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	for _, f := range all {
		line := "  --" + f.Name
		if t := typeName(f); t != "" {
			line += " " + t
		}
		fmt.Fprintln(&b, line)
		usage := f.Usage
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		for _, l := range wrap(usage, 88) {
			fmt.Fprintln(&b, "      "+l)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// typeName names what a flag takes from its value's type ("" for a boolean, which takes none).
func typeName(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.durationValue":
		return "duration"
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		return "int"
	case "*flag.float64Value":
		return "float"
	}
	return "string"
}

func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// Logging are the logging flags: --v (verbosity: 0 info, higher is more), --log-format (json, the
// default, for log collectors; text for people), and --debug (text at verbosity 1, kept for old
// command lines).
type Logging struct {
	V      int
	Format string
	Debug  bool
}

// Register adds the logging flags to fs.
func (l *Logging) Register(fs *flag.FlagSet) {
	fs.IntVar(&l.V, "v", 0, "log verbosity: 0 logs what an operator needs, 1 and more add detail")
	fs.StringVar(&l.Format, "log-format", "json", "log format: json (one JSON object per line) or text (for people)")
	fs.BoolVar(&l.Debug, "debug", false, "text logs at verbosity 1 (the same as --log-format=text --v=1)")
}

// Logger builds the logger the flags ask for and makes it controller-runtime's; it writes to
// stderr.
func (l *Logging) Logger() (logr.Logger, error) {
	format, v := l.Format, l.V
	if l.Debug {
		format, v = "text", max(v, 1)
	}
	if v < 0 {
		return logr.Discard(), &UsageError{fmt.Errorf("--v=%d: must not be negative", l.V)}
	}
	opts := []zap.Opts{zap.WriteTo(os.Stderr), zap.Level(zapcore.Level(-v))}
	switch format {
	case "json":
		opts = append(opts, zap.UseDevMode(false), zap.JSONEncoder())
	case "text":
		opts = append(opts, zap.UseDevMode(true), zap.ConsoleEncoder())
	default:
		return logr.Discard(), &UsageError{fmt.Errorf("--log-format=%q: json or text", l.Format)}
	}
	log := zap.New(opts...)
	ctrl.SetLogger(log)
	return log, nil
}
