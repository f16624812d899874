// The properties the checker holds at every state.

package model

import "fmt"

// A ghost is what the checker remembers of a master beyond what the master
// holds; no party of the protocol reads it.
type ghost struct {
	left int8 // the token a lost release left here (Redlock leaves it to its TTL); 0: none
	gone int8 // the token an Unlock that returned nil released here; 0: none
}

// violation returns the safety property s breaks, or "":
//   - no two holders' validity windows overlap;
//   - a master's key holds nothing or the token of a live Client's current
//     attempt (acquiring, holding, or releasing), but where a release to it
//     was lost;
//   - after an Unlock that returned nil, none of its tokens is left on a
//     master its release reached.
func violation(_ Config, s state) string {
	for i := range s.c {
		for j := i + 1; j < len(s.c); j++ {
			a, b := &s.c[i], &s.c[j]
			if a.phase == holding && b.phase == holding && s.now < a.until && s.now < b.until {
				return fmt.Sprintf("two holders at tick %d: client %d until %d, client %d until %d", s.now, i, a.until, j, b.until)
			}
		}
	}
	for m := range s.m {
		v := s.m[m].Val
		if v == 0 {
			continue
		}
		if v == s.g[m].gone {
			return fmt.Sprintf("a master holds token %d, whose Unlock returned nil after its release reached that master", v)
		}
		ci, attempt := int(v-1)/8, (v-1)%8
		c := &s.c[ci]
		if (c.phase == idle || c.attempt != attempt && v != c.prev) && v != s.g[m].left {
			return fmt.Sprintf("a master holds token %d, which no live holder has (client %d is done with it)", v, ci)
		}
	}
	return ""
}
