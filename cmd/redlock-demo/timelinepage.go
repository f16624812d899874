// The timeline's page: one self-contained HTML page holding an SVG picture
// of what a timeline recorded.

package main

import (
	"fmt"
	"html"
	"io"
	"os"
	"time"

	"github.com/redlock-go/redlock"
)

// The page's layout, in CSS pixels at its full width (a narrower window
// scales the picture down); the screenshot test reads lanes at these
// positions.
const (
	tlWidth         = 1200
	tlLabels        = 170 // the lane names' column
	tlRight         = 20
	tlTop           = 70 // the title and the verdict
	tlLane          = 18 // a lane's height
	tlGap           = 6  // between lanes
	tlAxis          = 28 // the time axis under the lanes, with its times
	tlPhases        = 38 // a -fault run's phases under the axis: a band of two lines of label, and a gap
	tlPhaseBand     = 32
	tlLegendRow     = 18
	tlLegendColumns = 3 // of tlPlotWidth/3 each: an entry's text stays under 300 px
	tlBottom        = 6
	tlPlotWidth     = tlWidth - tlLabels - tlRight
)

// Colours of the page; tlLegend says what each stands for.
const (
	tlHoldColour       = "#2e7d32"
	tlWaitColour       = "#cfd8dc"
	tlGaveUpColour     = "#ef6c00"
	tlLostColour       = "#c62828"
	tlRefusedColour    = "#ef6c00"
	tlVoteColour       = "#1565c0"
	tlFailColour       = "#c62828"
	tlQuarantineColour = "#8e24aa"
	tlUpColour         = "#e3f2fd"
	tlDownColour       = "#424242"
)

// tlPhaseColours alternate under the axis, a phase each.
var tlPhaseColours = [2]string{"#eeeeee", "#e0e0e0"}

// tlLegend is the legend, whatever the run drew: workers' colours, then
// masters'.
var tlLegend = []struct{ colour, what string }{
	{tlHoldColour, "hold"},
	{tlWaitColour, "wait"},
	{tlGaveUpColour, "gave up waiting, or refused attempt"},
	{tlLostColour, "lock lost, failed attempt, or overlap"},
	{tlVoteColour, "master voted yes"},
	{tlRefusedColour, "master refused (the key was another's)"},
	{tlFailColour, "master failed or timed out"},
	{tlQuarantineColour, "master quarantined: its yes not counted"},
	{tlDownColour, "master down"},
}

// lanes: the holds lane first, then the workers, then the masters.
func tlLaneY(i int) int { return tlTop + i*(tlLane+tlGap) }

// holdsLaneY, workerLaneY and masterLaneY are the top of each lane.
func holdsLaneY() int                { return tlLaneY(0) }
func workerLaneY(w int) int          { return tlLaneY(1 + w) }
func masterLaneY(workers, m int) int { return tlLaneY(1 + workers + m) }

// write renders the page.
func (t *timeline) write(w io.Writer, title string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	end := t.end
	if end == 0 {
		end = time.Since(t.start)
	}
	g := &svgPlot{w: w, t: t, end: end}
	g.header(title)
	g.lanes()
	g.downs()
	g.spans()
	g.marks()
	g.phases()
	g.axis()
	g.legend()
	g.p("</svg>\n</body></html>\n")
	return nil
}

// An svgPlot writes a timeline as an HTML page holding one SVG picture.
type svgPlot struct {
	w   io.Writer
	t   *timeline
	end time.Duration // the time the plot's width stands for
}

func (g *svgPlot) p(format string, args ...any) { fmt.Fprintf(g.w, format, args...) }

// x is the abscissa of time d.
func (g *svgPlot) x(d time.Duration) float64 {
	return tlLabels + float64(tlPlotWidth)*float64(d)/float64(g.end)
}

// width is the width of the span from..to, at least a pixel.
func (g *svgPlot) width(from, to time.Duration) float64 { return max(g.x(to)-g.x(from), 1) }

// axisY is the time axis's ordinate, under the lanes.
func (g *svgPlot) axisY() int { return tlLaneY(1+g.t.workers+len(g.t.addrs)) + 4 }

// phasesY is the top of the phases' row, under the axis's times.
func (g *svgPlot) phasesY() int { return g.axisY() + tlAxis }

// legendY is the top of the legend, under the phases if there are any.
func (g *svgPlot) legendY() int {
	if len(g.t.phases) == 0 {
		return g.phasesY()
	}
	return g.phasesY() + tlPhases
}

// height is the picture's.
func (g *svgPlot) height() int {
	rows := (len(tlLegend) + tlLegendColumns - 1) / tlLegendColumns
	return g.legendY() + rows*tlLegendRow + tlBottom
}

// header writes the page's start, the title and the verdict: whether two
// holds overlapped.
func (g *svgPlot) header(title string) {
	t := g.t
	height := g.height()
	holds := 0
	for _, s := range t.spans {
		if s.kind == tlHold {
			holds++
		}
	}
	verdict := fmt.Sprintf("No two holds overlap: %d holds, one at a time.", holds)
	verdictColour := tlHoldColour
	if over := overlaps(t.spans); len(over) > 0 {
		verdict = fmt.Sprintf("OVERLAP: %d times two workers held the lock at once (red in the top lane).", len(over))
		verdictColour = tlLostColour
	}
	g.p("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>\n", html.EscapeString(title))
	g.p("<style>body{margin:0;font-family:sans-serif;background:#fff}svg{display:block;max-width:100%%;height:auto}" +
		"text{font-size:12px;fill:#212121}.phase text{font-size:11px}</style></head><body>\n")
	g.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", tlWidth, height, tlWidth, height)
	g.p(`<text x="10" y="22" style="font-size:16px;font-weight:bold">%s</text>`+"\n", html.EscapeString(title))
	g.p(`<text x="10" y="48" style="font-size:14px;font-weight:bold;fill:%s" id="verdict">%s</text>`+"\n", verdictColour, html.EscapeString(verdict))
}

// lanes writes the lanes' names, and the masters' lanes' backgrounds.
func (g *svgPlot) lanes() {
	t := g.t
	label := func(y int, s string) {
		g.p(`<text x="10" y="%d">%s</text>`+"\n", y+tlLane-5, html.EscapeString(s))
	}
	label(holdsLaneY(), "lock held by anyone")
	for i := range t.workers {
		label(workerLaneY(i), fmt.Sprintf("worker %d", i+1))
	}
	for i, a := range t.addrs {
		label(masterLaneY(t.workers, i), "master "+a)
		g.p(`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", tlLabels, masterLaneY(t.workers, i), tlPlotWidth, tlLane, tlUpColour)
	}
}

// downs writes the times the masters were down.
func (g *svgPlot) downs() {
	for _, d := range g.t.downs {
		to := d.to
		if to == 0 {
			to = g.end
		}
		g.p(`<rect class="down" data-master="%d" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>down %v–%v</title></rect>`+"\n",
			d.master+1, g.x(d.from), masterLaneY(g.t.workers, d.master), g.width(d.from, to), tlLane, tlDownColour, d.from.Round(time.Millisecond), to.Round(time.Millisecond))
	}
}

// spans writes the workers' waits and holds, the holds lane, and the
// overlaps in it.
func (g *svgPlot) spans() {
	for _, s := range g.t.spans {
		y, h, colour, what := workerLaneY(s.lane)+4, tlLane-8, tlWaitColour, "waited"
		switch s.kind {
		case tlGaveUp:
			y, h, colour, what = workerLaneY(s.lane)+4, tlLane-8, tlGaveUpColour, "gave up after waiting"
		case tlHold:
			y, h, colour, what = workerLaneY(s.lane), tlLane, tlHoldColour, "held"
		case tlLost:
			y, h, colour, what = workerLaneY(s.lane), tlLane, tlLostColour, "held, then found the lock lost"
		}
		g.p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>worker %d %s %v</title></rect>`+"\n",
			g.x(s.from), y, g.width(s.from, s.to), h, colour, s.lane+1, what, (s.to - s.from).Round(100*time.Microsecond))
		if s.kind == tlHold || s.kind == tlLost {
			g.p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.6"/>`+"\n",
				g.x(s.from), holdsLaneY(), g.width(s.from, s.to), tlLane, colour)
		}
	}
	for _, o := range overlaps(g.t.spans) {
		g.p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>overlap</title></rect>`+"\n",
			g.x(o[0]), holdsLaneY(), g.width(o[0], o[1]), tlLane, tlLostColour)
	}
}

// marks writes refused attempts on the workers' lanes, and answers on the
// masters': failures in a lane's upper half, votes in its lower half.
// Quarantined votes go last, over the yeses they share a pixel with: the
// one the guard set aside, and other rounds'.
func (g *svgPlot) marks() {
	var quarantined []tlMark
	for _, m := range g.t.marks {
		switch {
		case !m.master:
			g.attempt(m)
		case m.outcome == redlock.NodeQuarantined:
			quarantined = append(quarantined, m)
		default:
			g.answer(m)
		}
	}
	for _, m := range quarantined {
		g.answer(m)
	}
}

// attempt writes a worker's lost attempt on its lane.
func (g *svgPlot) attempt(m tlMark) {
	what, colour := "refused attempt (the key was another's)", tlRefusedColour
	if m.outcome != redlock.NodeRefused {
		what, colour = "failed attempt (masters failed or timed out)", tlFailColour
	}
	g.p(`<rect x="%.1f" y="%d" width="2" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
		g.x(m.at)-1, workerLaneY(m.lane), tlLane, colour, what)
}

// answer writes a master's answer on its lane, a pixel wide and crisp, so
// that its colour is the legend's.
func (g *svgPlot) answer(m tlMark) {
	colour, y, title := tlVoteColour, masterLaneY(g.t.workers, m.lane)+tlLane/2, ""
	switch m.outcome {
	case redlock.NodeYes:
	case redlock.NodeRefused:
		colour = tlRefusedColour
	case redlock.NodeQuarantined:
		colour, title = tlQuarantineColour, "<title>quarantined: the restart guard did not count its yes</title>"
	default:
		colour, y = tlFailColour, masterLaneY(g.t.workers, m.lane)
	}
	g.p(`<rect x="%.1f" y="%d" width="1" height="%d" fill="%s" shape-rendering="crispEdges">%s</rect>`+"\n",
		g.x(m.at), y, tlLane/2, colour, title)
}

// phases writes a -fault run's phases: under the time axis a band for
// each, over its span and named, and a dashed line through the lanes where
// each but the first begins.
func (g *svgPlot) phases() {
	ps := g.t.phases
	y := g.phasesY()
	for i, p := range ps {
		to := g.end
		if i+1 < len(ps) {
			to = ps[i+1].from
		}
		x, w := g.x(p.from), g.width(p.from, to)
		g.p(`<g class="phase"><title>%s</title>`+"\n", html.EscapeString(p.about))
		g.p(`<clipPath id="phase-%d"><rect x="%.1f" y="%d" width="%.1f" height="%d"/></clipPath>`+"\n", i, x, y, w, tlPhaseBand)
		g.p(`<rect class="phase-span" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x, y, w, tlPhaseBand, tlPhaseColours[i%2])
		g.p(`<text class="phase-label" clip-path="url(#phase-%d)">`, i)
		for j, l := range p.label {
			weight := "normal"
			if j == 0 {
				weight = "bold"
			}
			g.p(`<tspan x="%.1f" y="%d" font-weight="%s">%s</tspan>`, x+4, y+13+14*j, weight, html.EscapeString(l))
		}
		g.p("</text>\n")
		if i > 0 {
			g.p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#616161" stroke-dasharray="4 3"/>`+"\n", x, tlTop, x, g.axisY())
		}
		g.p("</g>\n")
	}
}

// axis writes the time axis and its ticks.
func (g *svgPlot) axis() {
	axisY := g.axisY()
	g.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#212121"/>`+"\n", tlLabels, axisY, tlLabels+tlPlotWidth, axisY)
	step := tickStep(g.end)
	for d := time.Duration(0); d <= g.end; d += step {
		g.p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#212121"/><text x="%.1f" y="%d" text-anchor="middle">%v</text>`+"\n",
			g.x(d), axisY, g.x(d), axisY+5, g.x(d), axisY+18, d)
	}
}

// legend writes what each colour stands for, in rows of tlLegendColumns
// columns, so that every entry fits inside the picture.
func (g *svgPlot) legend() {
	g.p(`<g id="legend">` + "\n")
	for i, l := range tlLegend {
		lx := tlLabels + i%tlLegendColumns*(tlPlotWidth/tlLegendColumns)
		ly := g.legendY() + i/tlLegendColumns*tlLegendRow
		g.p(`<g class="legend-entry"><rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text></g>`+"\n",
			lx, ly, l.colour, lx+16, ly+10, html.EscapeString(l.what))
	}
	g.p("</g>\n")
}

// tickStep is a round step giving at most about 12 ticks over end.
func tickStep(end time.Duration) time.Duration {
	for _, s := range []time.Duration{
		time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		250 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 10 * time.Second, time.Minute,
	} {
		if end/s <= 12 {
			return s
		}
	}
	return 10 * time.Minute
}

// writeFile renders the page into path.
func (t *timeline) writeFile(path, title string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := t.write(f, title); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
