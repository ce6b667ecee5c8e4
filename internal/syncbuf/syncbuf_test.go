package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Every write of concurrent writers lands whole.
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := b.Write([]byte("line\n")); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 800 {
		t.Fatalf("%d lines, want 800", got)
	}
}
