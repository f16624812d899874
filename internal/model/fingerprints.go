package model

// fingerprints is a set of 64-bit state fingerprints: an open-addressing
// table with linear probing, kept at most half full. It takes 16 bytes a
// state where a Go map takes about 40, and no pointer for the collector to
// scan. Fingerprint 0 is stored as 1 (0 marks an empty slot): one more
// collision in 2⁶⁴.
type fingerprints struct {
	slots []uint64
	n     int
}

func newFingerprints() *fingerprints { return &fingerprints{slots: make([]uint64, 1<<20)} }

// add inserts h and reports whether it was new.
func (f *fingerprints) add(h uint64) bool {
	if h == 0 {
		h = 1
	}
	if 2*(f.n+1) > len(f.slots) {
		f.grow()
	}
	if !f.insert(h) {
		return false
	}
	f.n++
	return true
}

func (f *fingerprints) insert(h uint64) bool {
	mask := uint64(len(f.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch f.slots[i] {
		case 0:
			f.slots[i] = h
			return true
		case h:
			return false
		}
	}
}

func (f *fingerprints) grow() {
	old := f.slots
	f.slots = make([]uint64, 2*len(old))
	for _, h := range old {
		if h != 0 {
			f.insert(h)
		}
	}
}
