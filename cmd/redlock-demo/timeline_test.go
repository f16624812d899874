package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redlock-go/redlock"
)

// chromium returns the headless Chromium to render pages with: Debian's
// chromium-headless-shell, made for this and five times lighter to start,
// or a full chromium. Without one the test is skipped on a workstation, and
// fails in CI (CI=true), where scripts/ensure-redis.sh installs the shell.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium-headless-shell", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH; CI must install Debian's chromium-headless-shell package (scripts/ensure-redis.sh)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium-headless-shell)")
	return ""
}

// shots keeps the rendered pages' screenshots, to look at: go test
// -run Timeline ./cmd/redlock-demo -shots /tmp/shots.
var shots = flag.String("shots", "", "keep the timeline tests' screenshots in this directory")

// A rendering is a page as headless Chromium laid it out in a window of
// some width: its screenshot, and the boxes (in CSS pixels, from the
// window's top left) of the parts the tests check.
type rendering struct {
	width int
	img   image.Image
	probe
}

type probe struct {
	Viewport float64 `json:"viewport"` // the window's width, inside any scrollbar
	SVG      box     `json:"svg"`
	Legend   []struct {
		Colour string `json:"colour"`
		Text   string `json:"text"`
		Box    box    `json:"box"`
	} `json:"legend"`
	Phases []struct {
		Lines []string `json:"lines"`
		Span  box      `json:"span"`
		Label box      `json:"label"`
	} `json:"phases"`
	Downs []struct {
		Master int `json:"master"`
		Box    box `json:"box"`
	} `json:"downs"`
}

type box struct{ L, T, R, B float64 }

// within reports whether b lies inside o, give or take half a pixel of
// rounding.
func (b box) within(o box) bool {
	return b.L >= o.L-0.5 && b.T >= o.T-0.5 && b.R <= o.R+0.5 && b.B <= o.B+0.5
}

func (b box) overlaps(o box) bool { return b.L < o.R && o.L < b.R && b.T < o.B && o.T < b.B }

// probeScript, added at the end of a copy of the page, measures its parts
// as laid out and leaves them as JSON in a hidden <pre id="probe">, for
// --dump-dom.
const probeScript = `<script>
(() => {
  const box = e => { const r = e.getBoundingClientRect(); return {L: r.left, T: r.top, R: r.right, B: r.bottom}; };
  const all = (s, in_ = document) => Array.from(in_.querySelectorAll(s));
  const p = document.createElement("pre");
  p.id = "probe";
  p.hidden = true;
  p.textContent = JSON.stringify({
    viewport: document.documentElement.clientWidth,
    svg: box(document.querySelector("svg")),
    legend: all("#legend .legend-entry").map(e => ({colour: e.querySelector("rect").getAttribute("fill"), text: e.textContent, box: box(e)})),
    phases: all(".phase").map(e => ({lines: all("tspan", e).map(s => s.textContent), span: box(e.querySelector(".phase-span")), label: box(e.querySelector(".phase-label"))})),
    downs: all(".down").map(e => ({master: +e.dataset.master, box: box(e)})),
  });
  document.body.appendChild(p);
})();
</script>
`

var (
	svgHeight = regexp.MustCompile(`<svg [^>]*height="(\d+)"`)
	probeText = regexp.MustCompile(`(?s)<pre id="probe"[^>]*>(.*?)</pre>`)
)

// render renders page in headless Chromium in windows of the given widths,
// at once, and as tall as the picture. It makes t parallel, so that the
// tests' renderings wait for one another (Chromium starts slowly) while
// the runs of the demo before them do not.
func render(t *testing.T, page string, widths ...int) []rendering {
	t.Helper()
	t.Parallel()
	bin := chromium(t)
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	m := svgHeight.FindSubmatch(b)
	if m == nil {
		t.Fatal("the page has no <svg> with a height")
	}
	height, _ := strconv.Atoi(string(m[1]))
	probed := filepath.Join(t.TempDir(), "probed.html")
	if err := os.WriteFile(probed, bytes.Replace(b, []byte("</body>"), []byte(probeScript+"</body>"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := make([]rendering, len(widths))
	errs := make([]error, len(widths))
	var wg sync.WaitGroup
	for i, w := range widths {
		dir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i], errs[i] = renderIn(bin, dir, probed, w, height)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if *shots != "" {
		for _, r := range rs {
			keepShot(t, r)
		}
	}
	return rs
}

// renderIn renders page at width×height with Chromium's home in dir.
func renderIn(bin, dir, page string, width, height int) (rendering, error) {
	shot := filepath.Join(dir, "shot.png")
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--force-color-profile=srgb",
		fmt.Sprintf("--window-size=%d,%d", width, height),
		"--dump-dom", "--screenshot="+shot, "file://"+page)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		return rendering{}, fmt.Errorf("chromium at %dpx: %w\n%s", width, err, stderr.Bytes())
	}
	r := rendering{width: width}
	m := probeText.FindSubmatch(dom)
	if m == nil {
		return r, fmt.Errorf("chromium at %dpx: no probe in the DOM it dumped\n%s", width, stderr.Bytes())
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &r.probe); err != nil {
		return r, fmt.Errorf("chromium at %dpx: the probe: %w", width, err)
	}
	f, err := os.Open(shot)
	if err != nil {
		return r, err
	}
	defer f.Close()
	if r.img, err = png.Decode(f); err != nil {
		return r, err
	}
	if b := r.img.Bounds(); b.Dx() != width {
		return r, fmt.Errorf("screenshot is %dx%d, want %d wide", b.Dx(), b.Dy(), width)
	}
	return r, nil
}

// keepShot writes r's screenshot into the -shots directory.
func keepShot(t *testing.T, r rendering) {
	t.Helper()
	if err := os.MkdirAll(*shots, 0o755); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(*shots, fmt.Sprintf("%s-%d.png", strings.ReplaceAll(t.Name(), "/", "-"), r.width))
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(png.Encode(f, r.img), f.Close()); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot at %dpx: %s", r.width, name)
}

// near reports whether c is within a few levels of the colour #rrggbb.
func near(c color.Color, hex string) bool {
	var r, g, b uint8
	if _, err := fmt.Sscanf(hex, "#%02x%02x%02x", &r, &g, &b); err != nil {
		panic("near: not a colour: " + hex)
	}
	cr, cg, cb, _ := c.RGBA()
	d := func(a uint32, b uint8) bool { v := int(a>>8) - int(b); return v > -12 && v < 12 }
	return d(cr, r) && d(cg, g) && d(cb, b)
}

// runsOf counts the horizontal runs of colour hex across the plot at row y.
func runsOf(img image.Image, y int, hex string) int {
	runs, in := 0, false
	for x := tlLabels; x < tlLabels+tlPlotWidth; x++ {
		on := near(img.At(x, y), hex)
		if on && !in {
			runs++
		}
		in = on
	}
	return runs
}

// TestTimelinePageDrawsEveryHold renders a run's page in headless Chromium
// and counts the hold bars on the workers' lanes in the screenshot: there
// must be one per acquisition in the summary, and the page must say that
// none overlapped.
func TestTimelinePageDrawsEveryHold(t *testing.T) {
	page := filepath.Join(t.TempDir(), "run.html")
	out := runDemo(t, "-workers", "3", "-duration", "500ms", "-hold", "20ms", "-quiet", "-timeline", page)
	acquisitions := summaryInt(t, out, "acquisitions")
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), fmt.Sprintf("No two holds overlap: %d holds", acquisitions)) {
		t.Fatalf("the page's verdict does not say %d holds without overlap\n%s", acquisitions, out)
	}
	img := render(t, page, tlWidth)[0].img
	bars := 0
	for w := range 3 {
		bars += runsOf(img, workerLaneY(w)+tlLane/2, tlHoldColour)
	}
	if bars != acquisitions || acquisitions == 0 {
		t.Fatalf("the screenshot shows %d hold bars on the workers' lanes, the summary %d acquisitions", bars, acquisitions)
	}
	if runsOf(img, holdsLaneY()+tlLane/2, tlLostColour) != 0 {
		t.Fatal("the holds lane shows an overlap in red")
	}
}

// TestTimelinePageShowsOverlapWithoutTheLock is the control: with
// -parallel the same work runs without the lock, and the page must say so,
// with red on the holds lane.
func TestTimelinePageShowsOverlapWithoutTheLock(t *testing.T) {
	page := filepath.Join(t.TempDir(), "run.html")
	runDemo(t, "-parallel", "-workers", "3", "-duration", "300ms", "-hold", "20ms", "-quiet", "-timeline", page)
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "OVERLAP:") {
		t.Fatal("the page of a run without the lock does not report the overlap")
	}
	img := render(t, page, tlWidth)[0].img
	if runsOf(img, holdsLaneY()+tlLane/2, tlLostColour) == 0 {
		t.Fatal("no red on the holds lane of a run without the lock")
	}
}

// TestTimelineTellsRefusedFromFailedAttempts: a lost round where a master
// refused (the key was another's) is a refused attempt; one where masters
// only timed out or failed is a failed attempt, drawn as a failure, not as
// contention that was not there.
func TestTimelineTellsRefusedFromFailedAttempts(t *testing.T) {
	tl := newTimeline(1, []string{"a", "b", "c"})
	o := tl.observer()
	ctx := withWorker(context.Background(), 1)
	o.Round(redlock.RoundEvent{Ctx: ctx, Op: "lock", Votes: 1, Quorum: 2, Nodes: []redlock.NodeResult{
		{Node: 0, Outcome: redlock.NodeYes}, {Node: 1, Outcome: redlock.NodeTimeout}, {Node: 2, Outcome: redlock.NodeFailed},
	}})
	o.Round(redlock.RoundEvent{Ctx: ctx, Op: "lock", Votes: 1, Quorum: 2, Nodes: []redlock.NodeResult{
		{Node: 0, Outcome: redlock.NodeYes}, {Node: 1, Outcome: redlock.NodeTimeout}, {Node: 2, Outcome: redlock.NodeRefused},
	}})
	var page strings.Builder
	if err := tl.write(&page, "test"); err != nil {
		t.Fatal(err)
	}
	failed := strings.Count(page.String(), "<title>failed attempt")
	refused := strings.Count(page.String(), "<title>refused attempt")
	if failed != 1 || refused != 1 {
		t.Fatalf("the page marks %d failed and %d refused attempts, want 1 and 1", failed, refused)
	}
}

// TestTimelinePageOfAFaultRun renders the page of a -fault run, the
// fullest one (a row of phases under the axis), at the page's own width and
// in a narrower window: the legend, every entry of it, must lie inside the
// picture and the window, and every phase of the run must be named under
// the axis, over its span.
func TestTimelinePageOfAFaultRun(t *testing.T) {
	page := filepath.Join(t.TempDir(), "run.html")
	runDemo(t, "-fault", "-duration", "300ms", "-wait", "100ms", "-workers", "3", "-hold", "2ms", "-quiet", "-timeline", page)
	rs := render(t, page, tlWidth, 800)
	for _, r := range rs {
		t.Run(fmt.Sprintf("legend at %dpx", r.width), func(t *testing.T) { legendFits(t, r) })
	}
	t.Run("phases", func(t *testing.T) { phasesLabelled(t, rs[0]) })
}

// legendFits checks that r shows every entry of the legend, each inside
// the picture and the window, none over another.
func legendFits(t *testing.T, r rendering) {
	if !r.SVG.within(box{0, 0, r.Viewport, r.SVG.B}) {
		t.Errorf("the picture %+v overflows the %.0fpx window", r.SVG, r.Viewport)
	}
	if len(r.Legend) != len(tlLegend) {
		t.Fatalf("the legend shows %d entries, want %d", len(r.Legend), len(tlLegend))
	}
	for i, e := range r.Legend {
		if e.Colour != tlLegend[i].colour {
			t.Errorf("legend entry %d %q has colour %s, want %s", i, e.Text, e.Colour, tlLegend[i].colour)
		}
		if w := e.Box.R - e.Box.L; w < float64(16+3*utf8.RuneCountInString(e.Text))*r.SVG.R/tlWidth {
			t.Errorf("legend entry %q is %.1fpx wide: too narrow for its text (no fonts?)", e.Text, w)
		}
		if !e.Box.within(r.SVG) || !e.Box.within(box{0, 0, r.Viewport, r.SVG.B}) {
			t.Errorf("legend entry %q at %+v is cut off: the picture is %+v, the window %.0fpx wide", e.Text, e.Box, r.SVG, r.Viewport)
		}
		for _, o := range r.Legend[:i] {
			if e.Box.overlaps(o.Box) {
				t.Errorf("legend entries %q and %q overlap", o.Text, e.Text)
			}
		}
	}
}

// phasesLabelled checks that r, a -fault run's page at its own width,
// names the run's five phases under the axis in bands that follow one
// another to the end, each label inside its band, and that each band
// begins when the masters' lanes say its outage began or ended.
func phasesLabelled(t *testing.T, r rendering) {
	want := []string{"all 5 up", "master 1 down", "masters 1–2 down", "masters 1–3 down", "masters 1–3 restarted"}
	var names []string
	for _, p := range r.Phases {
		if len(p.Lines) > 0 {
			names = append(names, p.Lines[0])
		}
	}
	if !slices.Equal(names, want) {
		t.Fatalf("the page names the phases %q, want %q", names, want)
	}
	if l := r.Phases[3].Lines; len(l) < 2 || !strings.Contains(l[1], "no majority") {
		t.Errorf("the phase without a majority reads %q", l)
	}
	for i, p := range r.Phases {
		if !p.Label.within(p.Span) {
			t.Errorf("phase %q: its label %+v spills out of its band %+v", want[i], p.Label, p.Span)
		}
		if !p.Span.within(r.SVG) || p.Span.R-p.Span.L < 20 {
			t.Errorf("phase %q: its band %+v is not a span of the picture %+v", want[i], p.Span, r.SVG)
		}
		if i > 0 && math.Abs(p.Span.L-r.Phases[i-1].Span.R) > 1 {
			t.Errorf("phase %q begins at x=%.1f, the one before ends at %.1f", want[i], p.Span.L, r.Phases[i-1].Span.R)
		}
	}
	if end := r.Phases[4].Span.R; math.Abs(end-float64(tlLabels+tlPlotWidth)) > 1 {
		t.Errorf("the last phase ends at x=%.1f, not at the axis's end %d", end, tlLabels+tlPlotWidth)
	}
	// Masters 1 to 3 went down at the start of phases 1 to 3, and came
	// back at the start of the last.
	if len(r.Downs) != 3 {
		t.Fatalf("the masters' lanes show %d outages, want 3", len(r.Downs))
	}
	const slack = 3 // pixels: the time the demo takes between stopping a master and saying so
	for _, d := range r.Downs {
		if math.Abs(d.Box.L-r.Phases[d.Master].Span.L) > slack {
			t.Errorf("master %d goes down at x=%.1f, its phase %q begins at %.1f", d.Master, d.Box.L, want[d.Master], r.Phases[d.Master].Span.L)
		}
		if math.Abs(d.Box.R-r.Phases[4].Span.L) > slack {
			t.Errorf("master %d comes back at x=%.1f, the phase %q begins at %.1f", d.Master, d.Box.R, want[4], r.Phases[4].Span.L)
		}
	}
}

// TestTimelineDrawsQuarantinedVotesInTheirOwnColour: a master's yes that
// the restart guard did not count is drawn in a colour that nothing else
// on the page has, over the yes the master's reply drew, and the legend
// names it.
func TestTimelineDrawsQuarantinedVotesInTheirOwnColour(t *testing.T) {
	for _, c := range []string{tlHoldColour, tlWaitColour, tlGaveUpColour, tlLostColour, tlRefusedColour,
		tlVoteColour, tlFailColour, tlUpColour, tlDownColour, tlPhaseColours[0], tlPhaseColours[1]} {
		if strings.EqualFold(c, tlQuarantineColour) {
			t.Fatalf("the quarantined votes' colour %s is another's too", c)
		}
	}
	tl := newTimeline(1, []string{"a", "b", "c"})
	o := tl.observer()
	ctx := withWorker(context.Background(), 1)
	outcomes := []redlock.NodeOutcome{redlock.NodeYes, redlock.NodeYes, redlock.NodeRefused}
	for n, out := range outcomes {
		o.NodeReply(redlock.NodeReplyEvent{Ctx: ctx, Op: "lock", Node: n, Outcome: out})
	}
	outcomes[1] = redlock.NodeQuarantined // master 2's yes, set aside
	round := redlock.RoundEvent{Ctx: ctx, Op: "lock", Votes: 1, Quorum: 2}
	for n, out := range outcomes {
		round.Nodes = append(round.Nodes, redlock.NodeResult{Node: n, Outcome: out})
	}
	o.Round(round)
	// Another worker's round, a moment later, has master 2's yes too. On a
	// second's page all this falls on one pixel, as it does in a run: the
	// set-aside vote must show over the yeses.
	o.NodeReply(redlock.NodeReplyEvent{Ctx: ctx, Op: "lock", Node: 1, Outcome: redlock.NodeYes})
	tl.end = time.Second
	page := filepath.Join(t.TempDir(), "run.html")
	if err := tl.writeFile(page, "test"); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), `fill="`+tlQuarantineColour+`"`); n != 2 {
		t.Errorf("the page has %d shapes in the quarantined colour, want 2: the vote and the legend's", n)
	}
	r := render(t, page, tlWidth)[0]
	for m := range outcomes {
		runs := runsOf(r.img, masterLaneY(1, m)+tlLane*3/4, tlQuarantineColour)
		if want := map[bool]int{true: 1}[m == 1]; runs != want {
			t.Errorf("master %d's lane shows %d quarantined votes, want %d", m+1, runs, want)
		}
	}
	legend := false
	for _, e := range r.Legend {
		legend = legend || (e.Colour == tlQuarantineColour && strings.Contains(e.Text, "quarantined"))
	}
	if !legend {
		t.Error("the legend has no entry for quarantined votes")
	}
}
