package replay

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// The sweep of the bursts workload (replicas_test.go): one router spreads
// every burst, the replicas without sync pile it up, and with sync the
// window max/mean follows the delay: one router's below the arrivals'
// spacing, the unsynced replicas' well past it. windowMaxMean agrees with
// the per-burst count of TestReplicasSyncDelay (a burst is one window of
// 8 arrivals on 8 ranks).
func TestSyncSweep(t *testing.T) {
	w := bursts(t)
	cfg := DefaultConfig()
	cfg.Routers = 3
	rep, err := SyncSweep(w, cfg, mustPolicy(t, "kv"), []time.Duration{0, burstGap / 2, 20 * burstGap})
	if err != nil {
		t.Fatal(err)
	}
	if rep.One.WindowMaxMean != 1 || rep.One.Routers != 1 {
		t.Fatalf("one router: %+v, want window max/mean 1", rep.One)
	}
	if rep.NoSync.WindowMaxMean < 2 || rep.NoSync.Delay >= 0 {
		t.Fatalf("no sync: %+v, want window max/mean >= 2", rep.NoSync)
	}
	if len(rep.Points) != 3 || rep.Points[0].WindowMaxMean != 1 || rep.Points[1].WindowMaxMean != 1 {
		t.Fatalf("sync in 0 and %v: %+v, want window max/mean 1", burstGap/2, rep.Points)
	}
	if rep.Points[1].HitRatio != rep.One.HitRatio {
		t.Fatalf("sync in %v: hit ratio %v, one router's %v", burstGap/2, rep.Points[1].HitRatio, rep.One.HitRatio)
	}
	if slow := rep.Points[2]; slow.WindowMaxMean <= 1 {
		t.Fatalf("sync in %v: %+v, want worse than one router", 20*burstGap, slow)
	}
	// The same figure as the per-burst count of the simulation itself.
	c := cfg
	c.SyncDelay = -1
	if s := runSim(t, w, c, mustPolicy(t, "kv")); s.windowMaxMean() != burstMaxMean(s, c.Fleet.Workers) {
		t.Fatalf("windowMaxMean %v, per-burst max/mean %v", s.windowMaxMean(), burstMaxMean(s, c.Fleet.Workers))
	}

	var svg bytes.Buffer
	if err := PlotSyncSweep(&svg, rep, PlotSVG); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg.Bytes(), []byte("<svg")) || !bytes.Contains(svg.Bytes(), []byte("3 replicas, no sync")) || !bytes.HasSuffix(bytes.TrimSpace(svg.Bytes()), []byte("</svg>")) {
		t.Fatalf("svg: %.200s", svg.Bytes())
	}
	var png bytes.Buffer
	if err := PlotSyncSweep(&png, rep, PlotPNG); err != nil || !bytes.HasPrefix(png.Bytes(), []byte("\x89PNG")) {
		t.Fatalf("png: %v", err)
	}

	cfg.Routers = 1
	if _, err := SyncSweep(w, cfg, mustPolicy(t, "kv"), []time.Duration{0}); !errors.Is(err, ErrConfig) {
		t.Fatalf("one router: %v, want ErrConfig", err)
	}
	cfg.Routers = 3
	if _, err := SyncSweep(w, cfg, mustPolicy(t, "kv"), []time.Duration{-time.Millisecond}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a negative delay: %v, want ErrConfig", err)
	}
}
