// Command observability wires redlock to OpenTelemetry (the otel module)
// with a Prometheus exporter for the metrics and a stdout exporter for the
// traces, and shows what an operator sees when one master of five stops
// answering, as a SIGSTOPped or partitioned master does.
//
//	go run .                                  # five embedded masters; the fifth hangs after 1.5 s
//	go run . -metrics :9464 -duration 60s     # and scrape localhost:9464/metrics meanwhile
//	go run . -traces traces.json              # the spans, one JSON object each
//	go run . -nodes 127.0.0.1:7001,...,127.0.0.1:7005 -hang-at 0   # real masters: docker compose pause redis5
//
// In this repository, against its own core, each command runs through
// scripts/nested.sh: cd examples/observability && ../../scripts/nested.sh . go run .
//
// Workers take one lock in turn for -duration. The log (stderr, slog text)
// says when a master starts failing; at the end the program prints the
// metrics an operator would alert on, in Prometheus's text format.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/otel"
	"github.com/redlock-go/redlock/redlocktest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "observability:", err)
		os.Exit(1)
	}
}

type options struct {
	nodes    string
	duration time.Duration
	hangAt   time.Duration
	workers  int
	metrics  string
	traces   string
}

func run(ctx context.Context, args []string, out, logOut io.Writer) error {
	o, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	nodes, hang, heal, cleanup, err := masters(o)
	if err != nil {
		return err
	}
	defer cleanup()

	mp, metrics, stopMetrics, err := setUpMetrics(o)
	if err != nil {
		return err
	}
	defer stopMetrics()
	tp, stopTraces, err := setUpTraces(o)
	if err != nil {
		return err
	}
	defer stopTraces()

	obs, err := redlockotel.NewObserver(redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := redlock.New(nodes,
		redlock.WithObserver(obs),
		redlock.WithLogger(logger),
		redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close()
	if heal != nil {
		// First: Close need not wait out the hung requests. Once healed, the
		// fifth master runs the requests it held, late: the log after this
		// line is about those.
		defer func() {
			logger.Info("example: the fifth master answers again")
			heal()
		}()
	}

	fmt.Fprintf(out, "%d workers take one lock in turn for %v on five masters", o.workers, o.duration)
	if hang != nil {
		fmt.Fprintf(out, "; the fifth stops answering at %v", o.hangAt)
	}
	fmt.Fprintln(out)
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	if hang != nil {
		t := time.AfterFunc(o.hangAt, hang)
		defer t.Stop()
	}
	contend(ctx, c, o.workers)
	printMetrics(out, metrics)
	return nil
}

// parseFlags reads the command line into options.
func parseFlags(args []string, logOut io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("observability", flag.ContinueOnError)
	fs.SetOutput(logOut)
	fs.StringVar(&o.nodes, "nodes", "", "comma-separated host:port of five real masters (default: five embedded ones)")
	fs.DurationVar(&o.duration, "duration", 4*time.Second, "how long the workers run")
	fs.DurationVar(&o.hangAt, "hang-at", 1500*time.Millisecond, "embedded masters: when the fifth stops answering (0: never)")
	fs.IntVar(&o.workers, "workers", 4, "contending workers")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics on this address (/metrics) while running")
	fs.StringVar(&o.traces, "traces", "", "write the spans to this file (default: discard)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.workers < 1 || o.duration <= 0 || o.hangAt < 0 {
		return o, errors.New("-workers must be positive, -duration positive, -hang-at not negative")
	}
	return o, nil
}

// setUpMetrics makes an OTel meter provider whose reader is the Prometheus
// exporter, registered on its own registry, and serves it on o.metrics
// when set. stop shuts both down.
func setUpMetrics(o options) (mp *sdkmetric.MeterProvider, metrics http.Handler, stop func(), err error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, err
	}
	mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var srv *http.Server
	if o.metrics != "" {
		srv = &http.Server{Addr: o.metrics, Handler: metrics, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
	}
	return mp, metrics, func() {
		if srv != nil {
			_ = srv.Close()
		}
		_ = mp.Shutdown(context.Background())
	}, nil
}

// setUpTraces makes a tracer provider with the stdout exporter, writing
// into o.traces (default: discard). stop shuts it down.
func setUpTraces(o options) (tp *sdktrace.TracerProvider, stop func(), err error) {
	traceOut := io.Discard
	var f *os.File
	if o.traces != "" {
		if f, err = os.Create(o.traces); err != nil {
			return nil, nil, err
		}
		traceOut = f
	}
	texp, err := stdouttrace.New(stdouttrace.WithWriter(traceOut))
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, nil, err
	}
	tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(texp))
	return tp, func() {
		_ = tp.Shutdown(context.Background())
		if f != nil {
			_ = f.Close()
		}
	}, nil
}

// contend runs workers that take one lock in turn until ctx ends.
func contend(ctx context.Context, c *redlock.Client, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := c.Lock(ctx, "report:daily", 2*time.Second)
				if err != nil {
					continue
				}
				time.Sleep(5 * time.Millisecond) // the work
				_ = l.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
}

// printMetrics prints what an operator alerts on, as Prometheus scrapes it.
func printMetrics(out io.Writer, metrics http.Handler) {
	rec := httptest.NewRecorder()
	metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Fprintln(out, "\nmetrics (excerpt of /metrics):")
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		for _, name := range []string{"redlock_node_errors_total", "redlock_lock_acquisitions_total", "redlock_node_request_duration_seconds_count", "redlock_lock_wait_duration_seconds_count"} {
			if strings.HasPrefix(line, name+"{") {
				fmt.Fprintln(out, "  "+trimScope(line))
			}
		}
	}
}

// trimScope drops the otel_scope_* labels the exporter adds to every
// series, to keep the excerpt readable.
func trimScope(line string) string {
	open, closing := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if open < 0 || closing < open {
		return line
	}
	var kept []string
	for _, l := range strings.Split(line[open+1:closing], ",") {
		if !strings.HasPrefix(l, "otel_scope_") {
			kept = append(kept, l)
		}
	}
	return line[:open+1] + strings.Join(kept, ",") + line[closing:]
}

// masters returns the five masters' clients; with embedded ones, hang
// makes the fifth stop answering (it holds every request), and heal makes
// it answer again.
func masters(o options) (nodes []redis.UniversalClient, hang, heal, cleanup func(), err error) {
	var closers []func()
	cleanup = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if o.nodes != "" {
		for _, a := range strings.Split(o.nodes, ",") {
			c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(a)})
			closers = append(closers, func() { _ = c.Close() })
			nodes = append(nodes, c)
		}
		return nodes, nil, nil, cleanup, nil
	}
	m, err := redlocktest.Run(5)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	closers = append(closers, m.Close)
	if o.hangAt > 0 {
		var mu sync.Mutex // hang runs on a timer's goroutine
		var resume func()
		hang = func() {
			mu.Lock()
			defer mu.Unlock()
			resume = m.Pause(4)
		}
		heal = func() {
			mu.Lock()
			defer mu.Unlock()
			if resume != nil {
				resume()
			}
		}
	}
	nodes = m.Clients()
	return nodes, hang, heal, cleanup, nil
}
