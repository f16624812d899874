package model

import "testing"

func TestFingerprints(t *testing.T) {
	f := newFingerprints()
	const n = 3 << 20 // past two growths
	for i := range uint64(n) {
		h := i * 0x9e3779b97f4a7c15
		if !f.add(h) {
			t.Fatalf("%d: new fingerprint %#x taken for a repeat", i, h)
		}
		if f.add(h) {
			t.Fatalf("%d: repeated fingerprint %#x taken for new", i, h)
		}
	}
	if f.n != n || len(f.slots) < 2*n {
		t.Fatalf("%d fingerprints in %d slots", f.n, len(f.slots))
	}
}
