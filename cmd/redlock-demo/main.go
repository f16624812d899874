// Command redlock-demo shows the redlock library at work: workers contend for
// one lock guarding one record, as a web API would serialise updates to it.
// It prints a timeline (who holds, how long they waited, how much validity
// is left) and a summary that proves mutual exclusion: at most one holder at
// any time, and no lost update to the record.
//
// With no flags it runs on five embedded in-process masters, so it needs
// nothing but Go:
//
//	go run ./cmd/redlock-demo
//	go run ./cmd/redlock-demo -fault            # stop masters one by one, then bring them back
//	go run ./cmd/redlock-demo -parallel         # the same work without the lock, for comparison
//	go run ./cmd/redlock-demo -fence            # a holder paused past its validity: its stale fence is rejected
//	go run ./cmd/redlock-demo -nodes 127.0.0.1:7001,127.0.0.1:7002,...   # real masters
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock-demo:", err)
		os.Exit(1)
	}
}

type options struct {
	nodes    string
	workers  int
	duration time.Duration
	hold     time.Duration
	ttl      time.Duration
	wait     time.Duration
	parallel bool
	fault    bool
	fence    bool
	quiet    bool
	timeline string
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("redlock-demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.nodes, "nodes", "", "comma-separated host:port of real masters (default: five embedded masters)")
	fs.IntVar(&o.workers, "workers", 10, "number of contending workers")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "how long the workers run (with -fault: each phase)")
	fs.DurationVar(&o.hold, "hold", 20*time.Millisecond, "how long a worker works on the record while holding the lock")
	fs.DurationVar(&o.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.DurationVar(&o.wait, "wait", time.Second, "how long a worker waits for the lock before giving up")
	fs.BoolVar(&o.parallel, "parallel", false, "run the same work without the lock, to show what it prevents")
	fs.BoolVar(&o.fault, "fault", false, "stop one, two, then three embedded masters, then restart them")
	fs.BoolVar(&o.fence, "fence", false, "Kleppmann's scenario: a holder paused past its validity writes with a stale fence (-ttl defaults to 300ms)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the summary")
	fs.StringVar(&o.timeline, "timeline", "", "also write a picture of the run to this file: one HTML page, open it in a browser")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	ttlSet := false
	fs.Visit(func(f *flag.Flag) { ttlSet = ttlSet || f.Name == "ttl" })
	if o.fence && !ttlSet {
		o.ttl = fenceTTL
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	case o.workers < 1:
		return o, errors.New("-workers must be at least 1")
	case o.duration <= 0 || o.hold < 0 || o.ttl <= 0 || o.wait <= 0:
		return o, errors.New("-duration, -ttl and -wait must be positive, -hold not negative")
	case o.fault && o.nodes != "":
		return o, errors.New("-fault stops embedded masters; against real ones use docker compose stop/pause (see README)")
	case o.fault && o.wait >= o.duration:
		return o, errors.New("-fault needs -wait shorter than -duration, so that a phase without a majority shows its failures")
	case o.fault && o.parallel:
		return o, errors.New("-fault and -parallel do not go together")
	case o.fence && (o.fault || o.parallel):
		return o, errors.New("-fence goes with neither -fault nor -parallel")
	case o.fence && o.timeline != "":
		return o, errors.New("-timeline pictures the contending workers, not -fence")
	}
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	var m *masters
	if o.nodes == "" {
		m, err = embeddedMasters(5)
	} else {
		m, err = realMasters(o.nodes)
	}
	if err != nil {
		return err
	}
	defer m.close()

	printHeader(o, m, out)
	d, err := newDemo(o, m, out)
	if err != nil {
		return err
	}
	defer d.close()
	switch {
	case o.fence:
		return d.runFence(ctx)
	case o.fault:
		err = d.runFaults(ctx)
	default:
		err = d.runFor(ctx, o.duration)
	}
	d.summary()
	if o.timeline != "" {
		if werr := d.tl.writeFile(o.timeline, timelineTitle(o)); werr != nil {
			return errors.Join(err, werr)
		}
		fmt.Fprintf(out, "\ntimeline written to %s\n", o.timeline)
	}
	return err
}

// timelineTitle names the run on its page.
func timelineTitle(o options) string {
	mode := "redlock"
	switch {
	case o.parallel:
		mode = "no lock (-parallel)"
	case o.fault:
		mode = "redlock, masters stopped one by one (-fault)"
	}
	return fmt.Sprintf("redlock-demo: %d workers, hold %v, %s", o.workers, o.hold, mode)
}

// printHeader says what the run is about to show, and on which masters.
func printHeader(o options, m *masters, out io.Writer) {
	where := "five embedded masters"
	if o.nodes != "" {
		where = fmt.Sprintf("%d masters at %s", len(m.addrs), o.nodes)
	}
	if o.fence {
		fmt.Fprintf(out, "holders A and B (two Clients, as two processes) take %s's lock on %s;\n"+
			"A (ttl %v) is paused past its validity, then writes with its stale fence\n\n", resource, where, o.ttl)
		return
	}
	mode := "with redlock"
	if o.parallel {
		mode = "WITHOUT a lock (-parallel)"
	}
	fmt.Fprintf(out, "%d workers update one record %s on %s; each holds it %v (ttl %v)\n\n",
		o.workers, mode, where, o.hold, o.ttl)
}
