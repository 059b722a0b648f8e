package bench

import (
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotLatency draws the network programming latency percentiles (p50, p99) against N on log-log
// axes: vpcgw (solid, circles), each kube-proxy of the run (dotted, triangles), and the
// per-identity `nft -f` baseline (dashed, boxes), with the P3 targets.
func plotLatency(r *Result, path string) error {
	p := plot.New()
	p.Title.Text = "Network programming latency (EndpointSlice write → programmed)"
	p.X.Label.Text = "Services (N)"
	p.Y.Label.Text = "latency (ms)"
	if len(r.Sizes) > 1 {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	lp := latencyPlot{p: p, r: r}
	vpcgw := func(sr SizeResult) (Percentiles, bool) { return sr.Latency, true }
	if err := lp.add("vpcgw", nil, draw.CircleGlyph{}, vpcgw); err != nil {
		return err
	}
	for i, mode := range kubeProxyModes(r) {
		pick := func(sr SizeResult) (Percentiles, bool) {
			for _, k := range sr.KubeProxy {
				if k.MinSyncPeriod == mode {
					return k.Latency, true
				}
			}
			return Percentiles{}, false
		}
		dots := []vg.Length{vg.Points(1.5), vg.Points(2.5 + 2*float64(i))}
		if err := lp.add("kube-proxy (--min-sync-period "+mode+")", dots, draw.TriangleGlyph{}, pick); err != nil {
			return err
		}
	}
	baseline := func(sr SizeResult) (Percentiles, bool) {
		if sr.Baseline == nil {
			return Percentiles{}, false
		}
		return sr.Baseline.Latency, true
	}
	if err := lp.add("nft -f per identity", []vg.Length{vg.Points(6), vg.Points(3)}, draw.BoxGlyph{}, baseline); err != nil {
		return err
	}
	if err := lp.targets(); err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 6*vg.Inch, path)
}

// kubeProxyModes are the kube-proxies of the run, by minimum sync period, in their order.
func kubeProxyModes(r *Result) []string {
	var out []string
	for _, sr := range r.Sizes {
		for _, k := range sr.KubeProxy {
			if !slices.Contains(out, k.MinSyncPeriod) {
				out = append(out, k.MinSyncPeriod)
			}
		}
	}
	return out
}

type latencyPlot struct {
	p *plot.Plot
	r *Result
}

var (
	p50Colour = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	p99Colour = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// add draws one implementation's p50 and p99 lines.
func (lp latencyPlot) add(name string, dashes []vg.Length, shape draw.GlyphDrawer, pick func(SizeResult) (Percentiles, bool)) error {
	for _, s := range []struct {
		name   string
		get    func(Percentiles) float64
		colour color.Color
	}{{"p50", func(p Percentiles) float64 { return p.P50 }, p50Colour}, {"p99", func(p Percentiles) float64 { return p.P99 }, p99Colour}} {
		var xys plotter.XYs
		for _, sr := range lp.r.Sizes {
			if pc, ok := pick(sr); ok && pc.Count > 0 {
				xys = append(xys, plotter.XY{X: float64(sr.Services), Y: max(s.get(pc), 0.1)})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color, pts.Shape = s.colour, s.colour, shape
		l.Width, l.Dashes = vg.Points(1.5), dashes
		lp.p.Add(l, pts)
		lp.p.Legend.Add(name+" "+s.name, l, pts)
	}
	return nil
}

// targets draws P3's bounds on p99: the SPEC's 100 ms, and the 50 ms at 10,000.
func (lp latencyPlot) targets() error {
	if len(lp.r.Sizes) == 0 {
		return nil
	}
	lo, hi := float64(lp.r.Sizes[0].Services), float64(lp.r.Sizes[len(lp.r.Sizes)-1].Services)
	for _, t := range []struct {
		ms   float64
		text string
	}{{100, "P3: p99 under 100 ms"}, {50, "goal: p99 under 50 ms at 10,000"}} {
		line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: t.ms}, {X: hi, Y: t.ms}})
		if err != nil {
			return err
		}
		line.Color = color.Gray{Y: 0x80}
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		lp.p.Add(line)
		lp.p.Legend.Add(t.text, line)
	}
	return nil
}

// logTicks labels 1, 2 and 5 of every decade (gonum's LogTicks labels powers of ten only).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return out
}
