package main

import "testing"

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"shards", "shards", 0},
		{"shrads", "shards", 2}, {"shard", "shards", 1}, {"kitten", "sitting", 3}, {"block-szie", "block-size", 2},
	} {
		if got := editDistance(c.a, c.b); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
		if got := editDistance(c.b, c.a); got != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", c.b, c.a, got, c.d)
		}
	}
}

func TestClosest(t *testing.T) {
	flags := []string{"shards", "block-size", "demo-fleet", "demo-transport", "nats", "nats-port", "http-addr"}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"shrads", "shards", true},
		{"blocksize", "block-size", true},
		{"demo", "demo-fleet", true}, // a prefix: the shortest flag it starts
		{"nat", "nats", true},
		{"http-adr", "http-addr", true},
		{"zzzzzzzz", "", false},
		{"", "", false},
	} {
		got, ok := closest(c.name, flags)
		if got != c.want || ok != c.ok {
			t.Errorf("closest(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
