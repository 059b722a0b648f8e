package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/vpcgw/vpcgw/internal/cluster"
	"github.com/vpcgw/vpcgw/internal/labout"
)

// Main is `vpcgw-lab soak`: bring the lab up beside the real kube-ovn-controller, run the soak
// for --duration and print its report. It fails when a step did not converge, requests failed
// where none may, or something leaked.
func Main(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var cfg Config
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Minute, "how long to inject faults and churn (every fault runs at least once)")
	fs.DurationVar(&cfg.Gap, "gap", 20*time.Second, "steady traffic after each step converged")
	fs.IntVar(&cfg.Batch, "batch", 10, "requests per probe of each traffic stream")
	fs.DurationVar(&cfg.ConvergeTimeout, "converge-timeout", 3*time.Minute, "the longest a step may take to converge")
	lf := cluster.LabFlags{Make: "soak"}
	if err := lf.Register(fs); err != nil {
		return err
	}
	steps := fs.String("steps", "", "a regular expression: run only the steps whose names it matches (e.g. 'API server|scaled')")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *steps != "" {
		if cfg.Steps, err = regexp.Compile(*steps); err != nil {
			return fmt.Errorf("--steps: %w", err)
		}
	}
	if err := lf.Check(); err != nil {
		return err
	}
	ctx, stop, components := lf.Setup(ctx)
	defer stop()
	cfg.Out = os.Stdout

	if _, err := fmt.Fprintln(cfg.Out, "== vpcgw-lab soak: starting the lab beside kube-ovn-controller"); err != nil {
		return fmt.Errorf("soak: write progress: %w", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Bins: lf.Bins, AssetsDir: lf.Assets, KubeOVNDir: lf.KubeOVN, Log: components})
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("lab cleanup: %w", serr))
		}
	}()
	rep, err := Run(ctx, c, cfg)
	if rep != nil {
		err = errors.Join(err, WriteReport(cfg.Out, rep))
	}
	return err
}

// WriteReport prints a report as the Markdown tables of docs/reliability.md.
func WriteReport(w io.Writer, r *Report) error {
	out := labout.New(w)
	out.Printf("\n== soak report: %d steps in %s\n\n", len(r.Steps), r.Duration.Round(time.Second))
	out.Println("| step | kind | runs | converged (median / max) | failed in the window | failed after | long-lived flows broken |")
	out.Println("|---|---|---|---|---|---|---|")
	type agg struct {
		kind          Kind
		times         []time.Duration
		window, after Count
		flows         FlowCount
		errs          int
	}
	var order []string
	by := map[string]*agg{}
	for _, s := range r.Steps {
		a := by[s.Name]
		if a == nil {
			a = &agg{kind: s.Kind}
			by[s.Name] = a
			order = append(order, s.Name)
		}
		a.times = append(a.times, s.Converged)
		a.window.Sent += s.Window.Sent
		a.window.Failed += s.Window.Failed
		a.after.Sent += s.After.Sent
		a.after.Failed += s.After.Failed
		a.flows.add(s.Flows)
		if s.Err != nil {
			a.errs++
		}
	}
	for _, name := range order {
		a := by[name]
		med, mx := medianMax(a.times)
		flows := "-"
		if a.flows.Run > 0 {
			flows = fmt.Sprintf("%d of %d", a.flows.Broken, a.flows.Run)
			if a.flows.Gap > 0 {
				flows += fmt.Sprintf(" (+%d hairpin, gap)", a.flows.Gap)
			}
		}
		out.Printf("| %s | %s | %d | %s / %s | %d of %d | %d of %d | %s |\n", name, a.kind, len(a.times),
			med.Round(10*time.Millisecond), mx.Round(10*time.Millisecond), a.window.Failed, a.window.Sent, a.after.Failed, a.after.Sent, flows)
	}
	out.Printf("\nlong-lived flows (rr, upload, download, UDP; external and hairpin) across the gateway's replacements: %d of %d broken\n",
		r.Flows.Broken, r.Flows.Run)
	if r.Flows.Gap > 0 {
		out.Printf("and %d hairpin flows whose backend sent data were reset by a new gateway Pod before its agent ran (the open gap of SPEC D9, docs/connections.md)\n", r.Flows.Gap)
	}
	if r.Flows.LastBroken != "" {
		out.Printf("last broken: %s\n", r.Flows.LastBroken)
	}
	if r.LeaksChecked {
		out.Printf("\nstart: %s\nend:   %s\n", r.Baseline, r.End)
	} else {
		out.Printf("\nstart: %s\nend:   not read: the soak stopped early, so the leak check did not run\n", r.Baseline)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table := labout.New(tw)
	table.Println("\ncontroller lifetime\tsamples\tgoroutines (first, last)\tRSS MiB (first, last)\tagent RSS MiB (first, last)")
	for i, l := range r.Lifetimes {
		if len(l.Samples) == 0 {
			continue
		}
		f, e := l.Samples[0], l.Samples[len(l.Samples)-1]
		table.Printf("%d\t%d\t%d, %d\t%d, %d\t%d, %d\n", i+1, len(l.Samples), f.Goroutines, e.Goroutines, f.RSS>>20, e.RSS>>20, f.AgentRSS>>20, e.AgentRSS>>20)
	}
	flushErr := tw.Flush()
	if r.LeaksChecked && len(r.Leaks) == 0 {
		out.Println("no leak: records, VIP routes, lo VIPs, nft objects and UDP conntrack entries are back to the start; goroutines and memory within bounds")
	}
	if err := errors.Join(out.Err(), table.Err(), flushErr); err != nil {
		return fmt.Errorf("write the soak report: %w", err)
	}
	return nil
}

func medianMax(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2], s[len(s)-1]
}
