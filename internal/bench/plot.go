package bench

import (
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotLatency draws the network programming latency percentiles against N, vpcgw (solid) and
// the per-identity `nft -f` baseline (dashed), on log-log axes.
func plotLatency(r *Result, path string) error {
	p := plot.New()
	p.Title.Text = "Network programming latency (EndpointSlice write → gateway updated)"
	p.X.Label.Text = "Services on the gateway (N)"
	p.Y.Label.Text = "latency (ms)"
	if len(r.Sizes) > 1 {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}
	type series struct {
		name   string
		get    func(Percentiles) float64
		colour color.Color
	}
	pcts := []series{
		{"p50", func(p Percentiles) float64 { return p.P50 }, colors[0]},
		{"p90", func(p Percentiles) float64 { return p.P90 }, colors[1]},
		{"p99", func(p Percentiles) float64 { return p.P99 }, colors[2]},
	}
	add := func(name string, dashed bool, shape draw.GlyphDrawer, pick func(SizeResult) (Percentiles, bool), s series) error {
		var xys plotter.XYs
		for _, sr := range r.Sizes {
			if pc, ok := pick(sr); ok && pc.Count > 0 {
				xys = append(xys, plotter.XY{X: float64(sr.Services), Y: max(s.get(pc), 0.1)})
			}
		}
		if len(xys) == 0 {
			return nil
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color, pts.Shape = s.colour, s.colour, shape
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(name+" "+s.name, l, pts)
		return nil
	}
	for _, s := range pcts {
		if err := add("vpcgw", false, draw.CircleGlyph{}, func(sr SizeResult) (Percentiles, bool) { return sr.Latency, true }, s); err != nil {
			return err
		}
	}
	for _, s := range pcts {
		if err := add("nft -f per identity", true, draw.BoxGlyph{}, func(sr SizeResult) (Percentiles, bool) {
			if sr.Baseline == nil {
				return Percentiles{}, false
			}
			return sr.Baseline.Latency, true
		}, s); err != nil {
			return err
		}
	}
	// The P3 target.
	if len(r.Sizes) > 0 {
		lo, hi := float64(r.Sizes[0].Services), float64(r.Sizes[len(r.Sizes)-1].Services)
		target, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 100}, {X: hi, Y: 100}})
		if err != nil {
			return err
		}
		target.Color = color.Gray{Y: 0x80}
		target.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(target)
		p.Legend.Add("P3 target: p99 100 ms", target)
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
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
