package main

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// phaseColors keeps each phase the same colour in every chart.
var phaseColors = map[string]color.Color{
	PhaseLocal:   color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff},
	PhaseCold:    color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	PhaseWarm:    color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	PhaseRemount: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	PhaseDirect:  color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// chartSeries groups the byte-moving rows as workloads x phases (MiB/s),
// in the order they first appear; metadata-only rows are left out (their
// unit is ops/s).
func chartSeries(rows []Row) (workloads, phases []string, mibps map[string][]float64) {
	seenW := map[string]int{}
	seenP := map[string]bool{}
	for _, r := range rows {
		if r.metadataOnly() || r.Error != "" {
			continue
		}
		if _, ok := seenW[r.Workload]; !ok {
			seenW[r.Workload] = len(workloads)
			workloads = append(workloads, r.Workload)
		}
		if !seenP[r.Phase] {
			seenP[r.Phase] = true
			phases = append(phases, r.Phase)
		}
	}
	mibps = map[string][]float64{}
	for _, p := range phases {
		mibps[p] = make([]float64, len(workloads))
	}
	for _, r := range rows {
		if r.metadataOnly() || r.Error != "" {
			continue
		}
		mibps[r.Phase][seenW[r.Workload]] = r.Rate() / mib
	}
	return workloads, phases, mibps
}

// writeChart draws throughput per workload and phase as grouped bars, in
// format "svg" or "png", with the emulated link's cap (MiB/s) as a dashed
// line when linkCap > 0.
func writeChart(w io.Writer, title string, rows []Row, linkCap float64, format string) error {
	workloads, phases, mibps := chartSeries(rows)
	if len(workloads) == 0 {
		return fmt.Errorf("chart: no rows with bytes")
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "MiB/s"
	p.Y.Min = 0
	p.Legend.Top = true
	barW := vg.Points(float64(min(14, 60/len(phases))))
	for i, ph := range phases {
		bars, err := plotter.NewBarChart(plotter.Values(mibps[ph]), barW)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		if c, ok := phaseColors[ph]; ok {
			bars.Color = c
		}
		bars.Offset = barW * vg.Length(float64(i)-float64(len(phases)-1)/2)
		p.Add(bars)
		p.Legend.Add(ph, bars)
	}
	if linkCap > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: linkCap}, {X: float64(len(workloads)) - 0.5, Y: linkCap}})
		if err != nil {
			return err
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		line.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
		p.Add(line)
		p.Legend.Add("link cap", line)
	}
	p.Add(plotter.NewGrid())
	p.NominalX(workloads...)
	// Headroom above the tallest bar for the legend.
	top := linkCap
	for _, v := range mibps {
		for _, x := range v {
			top = max(top, x)
		}
	}
	p.Y.Max = 1.3 * top
	width := vg.Length(max(6, 1.3*float64(len(workloads)))) * vg.Inch
	wt, err := p.WriterTo(width, 4*vg.Inch, format)
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
