// Package redlockotel records a redlock Client's work as OpenTelemetry
// spans and metrics. It is built on redlock's Observer hook and lives in a
// module of its own, so that redlock's users who do not want OpenTelemetry
// never find it in their module graph (go-redis's extra/redisotel does the
// same).
//
//	obs, err := redlockotel.NewObserver() // the global providers; see the options
//	if err != nil { ... }
//	c, err := redlock.New(nodes, redlock.WithObserver(obs))
//
// # Spans
//
// One span per TryLock, Lock, Extend, Unlock and Do call, named
// "redlock." and the call's op ("redlock.try_lock", "redlock.lock", ...;
// see redlock.Observer for the names), child of the span in the call's ctx: Do's Lock, Extend and Unlock
// are children of Do's span. Each round of the call is an event on it
// ("redlock.round": op, votes, quorum, won, elapsed, and every master's
// outcome and latency), so a Lock span shows its attempts. The span ends
// with the call; a failed call sets the span's status to Error.
//
// # Metrics
//
// Named in OpenTelemetry's semantic-convention style; durations in seconds:
//
//	redlock.lock.wait.duration      histogram  TryLock/Lock, from call to return; redlock.operation, redlock.outcome
//	redlock.lock.hold.duration      histogram  from acquisition to Unlock; redlock.handed_off
//	redlock.node.request.duration   histogram  every request to a master, late replies too; server.address, redlock.op, redlock.node.outcome
//	redlock.lock.acquisitions       counter    redlock.outcome: obtained, contended, majority_unreachable, ctx_ended, failed
//	redlock.lock.lost               counter    locks lost while Do ran fn
//	redlock.lock.handoffs           counter    Unlocks that handed the lock to a waiter; redlock.remote
//	redlock.notices                 counter    notices received; redlock.notice.kind
//	redlock.node.errors             counter    server.address, error.type: timeout, refused, failed (as redlock.node.outcome)
//
// # Keys
//
// Lock keys can carry user data. By default spans carry redlock.key_hash
// (redlock.KeyHash), and metrics carry no key at all, ever: a key's
// cardinality is unbounded. WithKeyAttributes puts redlock.key on spans.
package redlockotel

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlock-go/redlock"
)

// scope is the instrumentation scope's name.
const scope = "github.com/redlock-go/redlock/otel"

// An Option configures NewObserver.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	keys bool
}

// WithTracerProvider records spans with tp instead of the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider records metrics with mp instead of the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithKeyAttributes puts lock keys on spans as they are (redlock.key)
// instead of their hash. Keys can carry user data: opt in only where your
// traces may hold it. Metrics never carry keys.
func WithKeyAttributes() Option {
	return func(c *config) { c.keys = true }
}

type instruments struct {
	tracer       trace.Tracer
	keys         bool
	wait, hold   metric.Float64Histogram
	nodeLatency  metric.Float64Histogram
	acquisitions metric.Int64Counter
	lost         metric.Int64Counter
	handoffs     metric.Int64Counter
	notices      metric.Int64Counter
	nodeErrors   metric.Int64Counter
}

// NewObserver returns the redlock.Observer that records spans and metrics;
// give it to redlock.New with redlock.WithObserver. It fails only when an
// instrument cannot be created.
func NewObserver(opts ...Option) (redlock.Observer, error) {
	cfg := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil || cfg.mp == nil {
		return redlock.Observer{}, errors.New("redlockotel: nil provider")
	}
	meter := cfg.mp.Meter(scope)
	in := &instruments{tracer: cfg.tp.Tracer(scope), keys: cfg.keys}
	var errs []error
	hist := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	in.wait = hist("redlock.lock.wait.duration", "Time from a TryLock or Lock call to its return.")
	in.hold = hist("redlock.lock.hold.duration", "Time from a lock's acquisition to its Unlock.")
	in.nodeLatency = hist("redlock.node.request.duration", "Time from a round's start to one master's reply, or its deadline.")
	in.acquisitions = counter("redlock.lock.acquisitions", "{call}", "TryLock and Lock calls, by outcome.")
	in.lost = counter("redlock.lock.lost", "{lock}", "Locks lost while Do ran fn.")
	in.handoffs = counter("redlock.lock.handoffs", "{handoff}", "Unlocks that handed the lock straight to a waiter.")
	in.notices = counter("redlock.notices", "{notice}", "Notices received about watched keys.")
	in.nodeErrors = counter("redlock.node.errors", "{error}", "Requests to a master that timed out, were refused or failed.")
	if err := errors.Join(errs...); err != nil {
		return redlock.Observer{}, fmt.Errorf("redlockotel: %w", err)
	}
	return redlock.Observer{
		Start:     in.start,
		Round:     in.round,
		NodeReply: in.nodeReply,
		Acquire:   in.acquire,
		Extend:    in.extend,
		Release:   in.release,
		DoEnd:     in.doEnd,
		Notice:    in.notice,
	}, nil
}

func (in *instruments) key(k string) attribute.KeyValue {
	if in.keys {
		return attribute.String("redlock.key", k)
	}
	return attribute.String("redlock.key_hash", redlock.KeyHash(k))
}

func (in *instruments) start(ctx context.Context, op, key string) context.Context {
	ctx, _ = in.tracer.Start(ctx, "redlock."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("redlock.operation", op), in.key(key)))
	return ctx
}

// end ends the call's span with err. An error's text names the key, so
// the span records it only under WithKeyAttributes; otherwise its kind.
func (in *instruments) end(ctx context.Context, err error, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attrs...)
	if err != nil {
		kind := errorKind(err)
		span.SetAttributes(attribute.String("error.type", kind))
		if in.keys {
			span.RecordError(err)
			kind = err.Error()
		}
		span.SetStatus(codes.Error, kind)
	}
	span.End()
}

// errorKind names err by the redlock error it matches.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{redlock.ErrLockLost, "lock_lost"},
		{redlock.ErrInvalidArgument, "invalid_argument"},
		{redlock.ErrClosed, "closed"},
		{redlock.ErrNotHeld, "not_held"},
		{redlock.ErrNotObtained, "not_obtained"},
		{context.DeadlineExceeded, "ctx_deadline"},
		{context.Canceled, "ctx_canceled"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "error"
}

func (in *instruments) round(e redlock.RoundEvent) {
	span := trace.SpanFromContext(e.Ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5+2*len(e.Nodes))
	attrs = append(attrs,
		attribute.String("redlock.op", e.Op),
		attribute.Int("redlock.votes", e.Votes),
		attribute.Int("redlock.quorum", e.Quorum),
		attribute.Bool("redlock.won", e.Won()),
		attribute.Float64("redlock.elapsed", e.Elapsed.Seconds()))
	for _, n := range e.Nodes {
		p := "redlock.node." + strconv.Itoa(n.Node)
		attrs = append(attrs,
			attribute.String(p+".outcome", n.Outcome.String()),
			attribute.Float64(p+".latency", n.Latency.Seconds()))
	}
	span.AddEvent("redlock.round", trace.WithAttributes(attrs...))
}

func (in *instruments) nodeReply(e redlock.NodeReplyEvent) {
	ctx := context.Background()
	addr := attribute.String("server.address", e.Addr)
	in.nodeLatency.Record(ctx, e.Latency.Seconds(), metric.WithAttributes(addr,
		attribute.String("redlock.op", e.Op), attribute.String("redlock.node.outcome", e.Outcome.String())))
	switch e.Outcome {
	case redlock.NodeTimeout, redlock.NodeRefused, redlock.NodeFailed:
		in.nodeErrors.Add(ctx, 1, metric.WithAttributes(addr, attribute.String("error.type", e.Outcome.String())))
	}
}

func (in *instruments) acquire(e redlock.AcquireEvent) {
	ctx := context.Background()
	outcome := attribute.String("redlock.outcome", e.Outcome.String())
	in.wait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(attribute.String("redlock.operation", e.Op), outcome))
	in.acquisitions.Add(ctx, 1, metric.WithAttributes(outcome))
	in.end(e.Ctx, e.Err, outcome)
}

func (in *instruments) extend(e redlock.ExtendEvent) {
	in.end(e.Ctx, e.Err, attribute.Bool("redlock.refused", errors.Is(e.Err, redlock.ErrNotHeld)))
}

func (in *instruments) release(e redlock.ReleaseEvent) {
	ctx := context.Background()
	handed := attribute.Bool("redlock.handed_off", e.HandedOff)
	in.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(handed))
	if e.HandedOff {
		in.handoffs.Add(ctx, 1, metric.WithAttributes(attribute.Bool("redlock.remote", e.Remote)))
	}
	in.end(e.Ctx, e.Err, handed, attribute.Float64("redlock.held", e.Held.Seconds()))
}

func (in *instruments) doEnd(e redlock.DoEvent) {
	lost := e.Lost != nil
	if lost {
		in.lost.Add(context.Background(), 1)
	}
	in.end(e.Ctx, e.Err, attribute.Bool("redlock.lost", lost), attribute.Float64("redlock.held", e.Held.Seconds()))
}

func (in *instruments) notice(e redlock.NoticeEvent) {
	in.notices.Add(context.Background(), 1, metric.WithAttributes(attribute.String("redlock.notice.kind", e.Kind)))
}
