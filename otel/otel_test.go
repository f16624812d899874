package redlockotel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
)

var bg = context.Background()

// setup starts five real masters and two Clients (as two processes) that
// record into one span recorder and one metric reader.
func setup(t *testing.T, opts ...Option) (servers []*redistest.Server, a, b *redlock.Client, spans *tracetest.SpanRecorder, reader *sdkmetric.ManualReader) {
	t.Helper()
	redistest.SkipShort(t)
	servers = redistest.StartN(t, 5)
	spans = tracetest.NewSpanRecorder()
	reader = sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := NewObserver(append([]Option{WithTracerProvider(tp), WithMeterProvider(mp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	client := func() *redlock.Client {
		var nodes []redis.UniversalClient
		for _, s := range servers {
			nodes = append(nodes, s.Client(nil))
		}
		c, err := redlock.New(nodes, redlock.WithObserver(obs), redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithRestartGuard(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, s := range servers {
				s.Resume()
			}
			_ = c.Close()
		})
		return c
	}
	return servers, client(), client(), spans, reader
}

func attr(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// sums returns, for counter name, the sum per value of attribute by (by
// "": the total, under "").
func sums(t *testing.T, reader *sdkmetric.ManualReader, name, by string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(bg, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T, want an int64 sum", name, m.Data)
			}
			for _, dp := range sum.DataPoints {
				k := ""
				if by != "" {
					v, _ := dp.Attributes.Value(attribute.Key(by))
					k = v.Emit()
				}
				out[k] += dp.Value
			}
		}
	}
	return out
}

// histogramCounts returns, for histogram name, the count per value of
// attribute by.
func histogramCounts(t *testing.T, reader *sdkmetric.ManualReader, name, by string) map[string]uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(bg, &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("%s is %T, want a float64 histogram", name, m.Data)
			}
			for _, dp := range h.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(by))
				out[v.Emit()] += dp.Count
			}
		}
	}
	return out
}

// TestSpansAndMetricsUnderAPausedMasterAndContention: one master of five is
// paused. A takes and releases the lock, B's TryLock on A's held lock is
// contended, and B's Do runs. The spans name the calls, carry their rounds
// as events and the key's hash, never the key; the metrics count the
// outcomes, the paused master's timeouts, and every master's latency.
func TestSpansAndMetricsUnderAPausedMasterAndContention(t *testing.T) {
	servers, a, b, spans, reader := setup(t)
	const key = "invoice:42"
	servers[4].Pause()
	l, err := a.TryLock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(bg, key, 10*time.Second); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("B's TryLock on a held key = %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if err := b.Do(bg, key, 10*time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// The paused master's requests are recorded after the calls returned:
	// the Unlocks' at the node deadline (50 ms), the others only when
	// go-redis gives up on them, about 5 s later here (its dial and read
	// timeouts; a connection to a paused master opens, but never answers).
	// A rehearsal saw the last still missing after 10 s. Wait until its
	// latency is recorded for four of the five calls' rounds, under a bound
	// far beyond that: both TryLocks and both Unlocks (a release is sent
	// late rather than dropped). Not Do's Lock: its request waits behind
	// B's stalled TryLock, and when Do's Unlock has given that master up
	// before the request's turn came, it is never sent, and nothing is
	// recorded (seen 2 runs in 40 with four test binaries side by side).
	const bound = 60 * time.Second
	for end := time.Now().Add(bound); ; time.Sleep(5 * time.Millisecond) {
		if histogramCounts(t, reader, "redlock.node.request.duration", "server.address")[servers[4].Addr] >= 4 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the paused master's requests were not recorded within %v: %v", bound,
				histogramCounts(t, reader, "redlock.node.request.duration", "server.address"))
		}
	}

	ended := spans.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range ended {
		byName[s.Name()] = append(byName[s.Name()], s)
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.Emit(), key) {
				t.Fatalf("span %s carries the key in %s", s.Name(), a.Key)
			}
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if strings.Contains(a.Value.Emit(), key) {
					t.Fatalf("span %s's event %s carries the key in %s", s.Name(), ev.Name, a.Key)
				}
			}
		}
		if strings.Contains(s.Status().Description, key) {
			t.Fatalf("span %s's status carries the key", s.Name())
		}
		if h, ok := attr(s.Attributes(), "redlock.key_hash"); !ok || h.AsString() != redlock.KeyHash(key) {
			t.Fatalf("span %s: redlock.key_hash = %v, want %s", s.Name(), h.Emit(), redlock.KeyHash(key))
		}
	}
	for name, n := range map[string]int{"redlock.try_lock": 2, "redlock.unlock": 2, "redlock.do": 1, "redlock.lock": 1} {
		if len(byName[name]) != n {
			t.Fatalf("%d %s spans, want %d (ended: %d spans)", len(byName[name]), name, n, len(ended))
		}
	}
	var contended sdktrace.ReadOnlySpan
	for _, s := range byName["redlock.try_lock"] {
		if len(s.Events()) != 1 || s.Events()[0].Name != "redlock.round" {
			t.Fatalf("TryLock span events %v, want its one round", s.Events())
		}
		ev := s.Events()[0].Attributes
		if q, _ := attr(ev, "redlock.quorum"); q.AsInt64() != 3 {
			t.Fatalf("round event quorum %v", q.Emit())
		}
		if o, _ := attr(ev, "redlock.node.0.outcome"); o.AsString() == "" {
			t.Fatal("round event without per-node outcomes")
		}
		if s.Status().Code == codes.Error {
			contended = s
		}
	}
	if contended == nil {
		t.Fatal("the contended TryLock's span has no Error status")
	}
	if o, _ := attr(contended.Attributes(), "redlock.outcome"); o.AsString() != "contended" {
		t.Fatalf("contended TryLock's outcome attribute %v", o.Emit())
	}
	do, lock := byName["redlock.do"][0], byName["redlock.lock"][0]
	if lock.Parent().SpanID() != do.SpanContext().SpanID() {
		t.Fatal("Do's Lock span is not a child of Do's span")
	}

	acq := sums(t, reader, "redlock.lock.acquisitions", "redlock.outcome")
	if acq["obtained"] != 2 || acq["contended"] != 1 {
		t.Fatalf("acquisitions by outcome %v, want 2 obtained, 1 contended", acq)
	}
	errs := sums(t, reader, "redlock.node.errors", "server.address")
	if errs[servers[4].Addr] == 0 {
		t.Fatalf("node errors by address %v: none for the paused master %s", errs, servers[4].Addr)
	}
	kinds := sums(t, reader, "redlock.node.errors", "error.type")
	if kinds["timeout"] == 0 || kinds["refused"] < 3 {
		t.Fatalf("node errors by type %v, want timeouts and the contended attempt's refusals", kinds)
	}
	lat := histogramCounts(t, reader, "redlock.node.request.duration", "server.address")
	for _, s := range servers {
		if lat[s.Addr] == 0 {
			t.Fatalf("no request latency recorded for %s: %v", s.Addr, lat)
		}
	}
	if w := histogramCounts(t, reader, "redlock.lock.wait.duration", "redlock.operation"); w["try_lock"] != 2 || w["lock"] != 1 {
		t.Fatalf("wait histogram counts %v", w)
	}
	if h := histogramCounts(t, reader, "redlock.lock.hold.duration", "redlock.handed_off"); h["false"] != 2 {
		t.Fatalf("hold histogram counts %v, want 2 plain releases", h)
	}
}

// TestKeyAttributesOptIn: WithKeyAttributes puts the key itself on spans,
// and still none on metrics.
func TestKeyAttributesOptIn(t *testing.T) {
	_, a, _, spans, reader := setup(t, WithKeyAttributes())
	l, err := a.TryLock(bg, "invoice:42", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	for _, s := range spans.Ended() {
		if k, _ := attr(s.Attributes(), "redlock.key"); k.AsString() != "invoice:42" {
			t.Fatalf("span %s: redlock.key = %q", s.Name(), k.Emit())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(bg, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if strings.Contains(m.Name, "invoice") || strings.Contains(dataString(m.Data), "invoice:42") {
				t.Fatalf("metric %s carries the key", m.Name)
			}
		}
	}
}

// dataString renders a metric's attributes, to look for a key in them.
func dataString(d metricdata.Aggregation) string {
	var b strings.Builder
	add := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			b.WriteString(kv.Value.Emit())
			b.WriteString(" ")
		}
	}
	switch d := d.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes)
		}
	}
	return b.String()
}

// TestLockLostCounted: keys deleted under Do make a lost lock, counted.
func TestLockLostCounted(t *testing.T) {
	servers, a, _, spans, reader := setup(t)
	err := a.Do(bg, "job", 300*time.Millisecond, func(ctx context.Context) error {
		for _, s := range servers {
			s.Client(nil).Del(bg, "job")
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do = %v", err)
	}
	if n := sums(t, reader, "redlock.lock.lost", "")[""]; n != 1 {
		t.Fatalf("lost locks counted: %d", n)
	}
	for _, s := range spans.Ended() {
		if s.Name() == "redlock.do" {
			if v, _ := attr(s.Attributes(), "redlock.lost"); !v.AsBool() || s.Status().Code != codes.Error {
				t.Fatal("Do's span does not say the lock was lost")
			}
		}
	}
}
