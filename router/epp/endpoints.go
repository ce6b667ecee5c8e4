package epp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvroute/kvroute/router"
)

// Pod is one entry of an endpoints file: a model-server pod.
type Pod struct {
	IP       string   `yaml:"ip" json:"ip"`
	Port     int      `yaml:"port" json:"port"`
	WorkerID *uint64  `yaml:"worker_id" json:"worker_id"`
	Model    string   `yaml:"model" json:"model"`
	Role     string   `yaml:"role" json:"role"`
	DpRanks  []uint32 `yaml:"dp_ranks" json:"dp_ranks"`
}

// Pod roles. A prefill pod takes no whole request, so the picker never
// names it; "" is RoleBoth.
const (
	RoleBoth    = "both"
	RoleDecode  = "decode"
	RolePrefill = "prefill"
)

// ParseEndpoints parses an endpoints file: a YAML or JSON list of pods
// (ip, port, worker_id, model, role, dp_ranks). Errors name the entry and
// field. Prefill pods are left out of the workers returned.
func ParseEndpoints(data []byte) ([]router.StaticWorker, error) {
	var pods []Pod
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&pods); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a YAML or JSON list of pods (ip, port, worker_id, model, role, dp_ranks): %v", err)
	}
	ws := make([]router.StaticWorker, 0, len(pods))
	ids := map[uint64]int{}
	addrs := map[string]int{}
	for i, p := range pods {
		if net.ParseIP(p.IP) == nil {
			return nil, fmt.Errorf("[%d].ip: %q is not an IP address", i, p.IP)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("[%d].port: %d is not a port (1..65535)", i, p.Port)
		}
		if p.WorkerID == nil {
			return nil, fmt.Errorf("[%d].worker_id: missing (the worker id the pod's KV events carry)", i)
		}
		switch p.Role {
		case "", RoleBoth, RoleDecode, RolePrefill:
		default:
			return nil, fmt.Errorf("[%d].role: %q is not one of both, decode, prefill", i, p.Role)
		}
		for j, r := range p.DpRanks {
			if r > 1<<16 {
				return nil, fmt.Errorf("[%d].dp_ranks[%d]: %d is too large", i, j, r)
			}
		}
		addr := net.JoinHostPort(p.IP, strconv.Itoa(p.Port))
		if k, dup := ids[*p.WorkerID]; dup {
			return nil, fmt.Errorf("[%d].worker_id: %d is also entry %d's", i, *p.WorkerID, k)
		}
		if k, dup := addrs[addr]; dup {
			return nil, fmt.Errorf("[%d]: %s is also entry %d's address", i, addr, k)
		}
		ids[*p.WorkerID], addrs[addr] = i, i
		if p.Role == RolePrefill {
			continue
		}
		ws = append(ws, router.StaticWorker{ID: *p.WorkerID, URL: "http://" + addr, DpRanks: p.DpRanks, Model: p.Model})
	}
	return ws, nil
}

// EndpointsConfig configures WatchEndpoints.
type EndpointsConfig struct {
	Path string
	// Interval between checks of the file. Default 2 s.
	Interval time.Duration
	Router   *router.Router
	// Joined and Left, when set, are told of the workers the file adds and
	// removes (the KV-event ingest's known workers).
	Joined func(w router.StaticWorker)
	Left   func(id uint64)
	Logger *slog.Logger
}

// The source name of the endpoints file's workers (router.SetEndpoints).
const endpointsSource = "endpoints-file"

// EndpointsWatcher keeps a router's workers in step with an endpoints
// file. Goroutine-safe; Close stops it.
type EndpointsWatcher struct {
	cfg  EndpointsConfig
	last []byte
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// WatchEndpoints loads the endpoints file into the router (an error names
// --endpoints-file) and re-reads it whenever its content changes; a
// changed file that does not parse is logged and the workers are kept, and
// an empty one (a file being rewritten) is skipped: an empty fleet is [].
func WatchEndpoints(cfg EndpointsConfig) (*EndpointsWatcher, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &EndpointsWatcher{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.load(); err != nil {
		return nil, fmt.Errorf("--endpoints-file %s: %w", cfg.Path, err)
	}
	go w.run()
	return w, nil
}

// Close stops watching. Idempotent.
func (w *EndpointsWatcher) Close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
}

func (w *EndpointsWatcher) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			if err := w.load(); err != nil {
				w.cfg.Logger.Warn("endpoints file not applied; the workers it gave before are kept", "path", w.cfg.Path, "err", err)
			}
		}
	}
}

// load reads the file and applies it when its content changed.
func (w *EndpointsWatcher) load() error {
	data, err := os.ReadFile(w.cfg.Path)
	if err != nil {
		return err
	}
	if w.last != nil && bytes.Equal(data, w.last) {
		return nil
	}
	if w.last != nil && len(bytes.TrimSpace(data)) == 0 {
		// A file truncated to be written again (os.WriteFile, an editor):
		// read between the truncation and the write it would drop every
		// worker. An empty fleet is written as [].
		return nil
	}
	ws, err := ParseEndpoints(data)
	if err != nil {
		w.last = data // reported once, until it changes again
		return err
	}
	w.last = data
	added, removed, err := w.cfg.Router.SetEndpoints(endpointsSource, ws)
	for _, id := range removed {
		if w.cfg.Left != nil {
			w.cfg.Left(id)
		}
	}
	for _, id := range added {
		for _, s := range ws {
			if s.ID == id && w.cfg.Joined != nil {
				w.cfg.Joined(s)
			}
		}
	}
	w.cfg.Logger.Info("endpoints file applied", "path", w.cfg.Path, "workers", len(ws), "added", added, "removed", removed)
	return err
}
