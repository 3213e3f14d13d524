package kernels

import (
	"errors"
	"reflect"
	"testing"
)

func TestSpacePointsOrderAndValidity(t *testing.T) {
	s := NewSpace(Ints("a", 2, 1), Ints("b", 10, 20, 30)).Where(func(p *Problem, c Config, caps Caps) error {
		if c["a"]*c["b"] > 40 {
			return errors.New("too big")
		}
		return nil
	})
	if s.Size() != 6 {
		t.Fatalf("size %d", s.Size())
	}
	var keys []string
	var valid []string
	for _, c := range s.Points() {
		keys = append(keys, c.Key())
		if s.Valid(nil, c, Lavapipe) == nil {
			valid = append(valid, c.Key())
		}
	}
	want := []string{"a=2,b=10", "a=2,b=20", "a=2,b=30", "a=1,b=10", "a=1,b=20", "a=1,b=30"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("points %v, want %v", keys, want)
	}
	if w := []string{"a=2,b=10", "a=2,b=20", "a=1,b=10", "a=1,b=20", "a=1,b=30"}; !reflect.DeepEqual(valid, w) {
		t.Errorf("valid %v, want %v", valid, w)
	}
	if err := s.Valid(nil, Config{"a": 3, "b": 10}, Lavapipe); err == nil {
		t.Error("a value outside the declared ones was accepted")
	}
	if err := s.Valid(nil, Config{"a": 1}, Lavapipe); err == nil {
		t.Error("a configuration lacking a parameter was accepted")
	}
}

// Space.All walks every registered template's space in Points' order, and stops when asked.
func TestSpaceAllIsPoints(t *testing.T) {
	for _, tm := range Templates() {
		var got []Config
		for c := range tm.Space.All() {
			got = append(got, c)
		}
		if want := tm.Space.Points(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: All gives %d points, Points %d (or another order)", tm.Name, len(got), len(want))
		}
		n := 0
		for range tm.Space.All() {
			if n++; n == 2 {
				break
			}
		}
		if size := tm.Space.Size(); n != min(size, 2) {
			t.Errorf("%s: stopped after %d points of %d, want 2", tm.Name, n, size)
		}
	}
}
