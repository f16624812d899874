package redlockotel_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/otel"
	"github.com/redlock-go/redlock/redlocktest"
)

// NewObserver with the global providers: what a service that has set up
// OpenTelemetry does.
func ExampleNewObserver() {
	masters, err := redlocktest.Run(3) // in production: independent redis-server masters
	if err != nil {
		panic(err)
	}
	defer masters.Close()

	obs, err := redlockotel.NewObserver()
	if err != nil {
		panic(err)
	}
	c, err := redlock.New(masters.Clients(), redlock.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithTracerProvider records spans with a provider of one's own: here a
// recorder, which shows the span a TryLock makes.
func ExampleWithTracerProvider() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		panic(err)
	}
	defer masters.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, _ := redlockotel.NewObserver(redlockotel.WithTracerProvider(tp))
	c, _ := redlock.New(masters.Clients(), redlock.WithObserver(obs))
	defer c.Close()
	l, _ := c.TryLock(context.Background(), "invoice:42", time.Minute)
	_ = l.Unlock(context.Background())

	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// redlock.try_lock
	// redlock.unlock
}

// WithMeterProvider records metrics with a provider of one's own: here a
// manual reader, which shows the acquisitions counter.
func ExampleWithMeterProvider() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		panic(err)
	}
	defer masters.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	obs, _ := redlockotel.NewObserver(redlockotel.WithMeterProvider(mp))
	c, _ := redlock.New(masters.Clients(), redlock.WithObserver(obs))
	defer c.Close()
	l, _ := c.TryLock(context.Background(), "invoice:42", time.Minute)
	_ = l.Unlock(context.Background())

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redlock.lock.acquisitions" {
				for _, p := range sum.DataPoints {
					outcome, _ := p.Attributes.Value(attribute.Key("redlock.outcome"))
					fmt.Println(m.Name, outcome.AsString(), p.Value)
				}
			}
		}
	}
	// Output: redlock.lock.acquisitions obtained 1
}

// WithKeyAttributes puts the key itself on spans, where by default only
// its hash is: opt in only where traces may hold user data.
func ExampleWithKeyAttributes() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		panic(err)
	}
	defer masters.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, _ := redlockotel.NewObserver(redlockotel.WithTracerProvider(tp), redlockotel.WithKeyAttributes())
	c, _ := redlock.New(masters.Clients(), redlock.WithObserver(obs))
	defer c.Close()
	l, _ := c.TryLock(context.Background(), "invoice:42", time.Minute)
	_ = l.Unlock(context.Background())

	for _, a := range spans.Ended()[0].Attributes() {
		if a.Key == "redlock.key" {
			fmt.Println(a.Key, a.Value.AsString())
		}
	}
	// Output: redlock.key invoice:42
}
