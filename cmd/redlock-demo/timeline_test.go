package main

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
)

// chromium returns the headless Chromium to render pages with. Without one
// the test is skipped on a workstation, and fails in CI (CI=true), which
// installs Debian's chromium package.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-headless-shell", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH; CI must install Debian's chromium package")
	}
	t.Skip("no chromium on PATH (apt-get install chromium)")
	return ""
}

// screenshot renders page in headless Chromium at the timeline's size and
// returns the picture.
func screenshot(t *testing.T, page string, workers, masters int) image.Image {
	t.Helper()
	bin := chromium(t)
	out := filepath.Join(t.TempDir(), "shot.png")
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--force-color-profile=srgb",
		fmt.Sprintf("--window-size=%d,%d", tlWidth, tlHeight(workers, masters)),
		"--screenshot="+out, "file://"+page)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != tlWidth {
		t.Fatalf("screenshot is %dx%d, want %d wide", b.Dx(), b.Dy(), tlWidth)
	}
	return img
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
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), fmt.Sprintf("No two holds overlap: %d holds", acquisitions)) {
		t.Fatalf("the page's verdict does not say %d holds without overlap", acquisitions)
	}
	img := screenshot(t, page, 3, 5)
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
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "OVERLAP:") {
		t.Fatal("the page of a run without the lock does not report the overlap")
	}
	img := screenshot(t, page, 3, 5)
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
