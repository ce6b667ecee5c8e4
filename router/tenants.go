package router

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"
	"go.yaml.in/yaml/v3"

	"github.com/kvroute/kvroute/sched"
)

// The headers that name a request's tenant, priority class and session
// (README, "Tenants, priorities and sessions").
const (
	HeaderTenant        = "X-Kvroute-Tenant"
	HeaderPriority      = "X-Kvroute-Priority"
	HeaderSession       = "X-Session-ID"
	HeaderDynamoSession = "X-Dynamo-Session-ID" // Dynamo's name, accepted too
)

// TenantSpec is one tenant of the --tenants file.
type TenantSpec struct {
	Name string `yaml:"name"`
	// Weight is the tenant's share of a contended fleet (default 1).
	Weight float64 `yaml:"weight"`
	// Rate limits the tenant's prompt tokens per second (0: unlimited),
	// with a bucket of Burst tokens (default: one second of Rate).
	Rate  float64 `yaml:"rate"`
	Burst float64 `yaml:"burst"`
	// Class is the class of the tenant's requests that send no
	// X-Kvroute-Priority (default standard).
	Class string `yaml:"class"`
	// APIKeys are the SHA-256 hashes, in hex, of the bearer tokens that
	// identify the tenant ("sha256:" prefix optional); never the tokens.
	APIKeys []string `yaml:"api_keys"`
}

// TenantsFile is the --tenants file: the tenants, and the class of requests
// that name no known tenant.
type TenantsFile struct {
	Tenants      []TenantSpec `yaml:"tenants"`
	DefaultClass string       `yaml:"default_class"`
}

// ParseTenants parses and validates a --tenants file; an error names the
// line and the field.
func ParseTenants(data []byte) (*TenantsFile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	f := &TenantsFile{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && err.Error() != "EOF" {
		return nil, err
	}
	line := func(key string) int { return lineOf(&doc, key) }
	if f.DefaultClass != "" {
		if _, err := sched.ParseClass(f.DefaultClass); err != nil {
			return nil, fmt.Errorf("line %d: default_class: %q is not critical, standard or sheddable", line("default_class"), f.DefaultClass)
		}
	}
	names := map[string]bool{}
	keys := map[string]string{}
	for i := range f.Tenants {
		t := &f.Tenants[i]
		at := func(field string) int {
			if n := tenantField(&doc, i, field); n > 0 {
				return n
			}
			return tenantField(&doc, i, "")
		}
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("line %d: tenants[%d].name is missing", at("name"), i)
		case names[t.Name]:
			return nil, fmt.Errorf("line %d: tenants[%d].name %q appears twice", at("name"), i, t.Name)
		case t.Weight < 0 || math.IsNaN(t.Weight) || math.IsInf(t.Weight, 0):
			return nil, fmt.Errorf("line %d: tenants[%d].weight %v must be > 0", at("weight"), i, t.Weight)
		case t.Rate < 0 || math.IsNaN(t.Rate) || math.IsInf(t.Rate, 0):
			return nil, fmt.Errorf("line %d: tenants[%d].rate %v must be ≥ 0 (prompt tokens per second)", at("rate"), i, t.Rate)
		case t.Burst < 0 || math.IsNaN(t.Burst) || math.IsInf(t.Burst, 0):
			return nil, fmt.Errorf("line %d: tenants[%d].burst %v must be ≥ 0 (prompt tokens)", at("burst"), i, t.Burst)
		}
		names[t.Name] = true
		if t.Weight == 0 {
			t.Weight = 1
		}
		if t.Burst == 0 {
			t.Burst = t.Rate
		}
		if t.Class != "" {
			if _, err := sched.ParseClass(t.Class); err != nil {
				return nil, fmt.Errorf("line %d: tenants[%d].class %q is not critical, standard or sheddable", at("class"), i, t.Class)
			}
		}
		for j, k := range t.APIKeys {
			h := strings.ToLower(strings.TrimPrefix(k, "sha256:"))
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("line %d: tenants[%d].api_keys[%d] must be a SHA-256 hash in hex (64 digits), never the key itself", at("api_keys"), i, j)
			}
			if o, ok := keys[h]; ok {
				return nil, fmt.Errorf("line %d: tenants[%d].api_keys[%d] is also tenant %q's", at("api_keys"), i, j, o)
			}
			keys[h] = t.Name
			t.APIKeys[j] = h
		}
	}
	return f, nil
}

// lineOf returns the line of a top-level key's value (1 if absent).
func lineOf(doc *yaml.Node, key string) int {
	if len(doc.Content) == 0 {
		return 1
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1].Line
		}
	}
	return m.Line
}

// tenantField returns the line of tenants[i].field (of the entry when
// field is "" or absent; 0 if there is no such entry).
func tenantField(doc *yaml.Node, i int, field string) int {
	if len(doc.Content) == 0 {
		return 0
	}
	m := doc.Content[0]
	for k := 0; k+1 < len(m.Content); k += 2 {
		if m.Content[k].Value != "tenants" {
			continue
		}
		seq := m.Content[k+1]
		if i >= len(seq.Content) {
			return seq.Line
		}
		ent := seq.Content[i]
		for j := 0; j+1 < len(ent.Content); j += 2 {
			if field != "" && ent.Content[j].Value == field {
				return ent.Content[j].Line
			}
		}
		return ent.Line
	}
	return 0
}

// HashAPIKey is the hash a --tenants file lists for an API key: SHA-256,
// in hex.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// tenants is the router's identity table: tenant names to the scheduler's
// dense ids (stable across reloads: a name keeps its id), API-key hashes
// to names, and each tenant's default class and token bucket.
// Goroutine-safe.
type tenants struct {
	mu struct {
		sync.Mutex
		file    *TenantsFile
		ids     map[string]uint32
		names   []string // by id; [0] is "" (the default tenant)
		byKey   map[string]string
		spec    map[string]*TenantSpec
		class   map[string]sched.Class // each spec's Class, parsed once
		defCls  sched.Class            // the file's DefaultClass, parsed once
		buckets map[uint32]*sched.TokenBucket
		stamp   time.Time // the file's modification time when read
		dirty   bool      // weights to hand to the scheduler
	}
	path  string
	epoch time.Time
}

func newTenants(path string, epoch time.Time) (*tenants, error) {
	t := &tenants{path: path, epoch: epoch}
	t.mu.ids = map[string]uint32{"": 0}
	t.mu.names = []string{""}
	t.mu.buckets = map[uint32]*sched.TokenBucket{}
	t.mu.file = &TenantsFile{}
	t.mu.spec = map[string]*TenantSpec{}
	t.mu.class = map[string]sched.Class{}
	t.mu.byKey = map[string]string{}
	if path == "" {
		return t, nil
	}
	if _, err := t.reload(true); err != nil {
		return nil, err
	}
	return t, nil
}

// reload re-reads the file if it changed (or force), and reports whether
// it did. A file that fails validation leaves the table as it was.
func (t *tenants) reload(force bool) (bool, error) {
	st, err := os.Stat(t.path)
	if err != nil {
		return false, fmt.Errorf("--tenants %s: %w", t.path, err)
	}
	t.mu.Lock()
	same := !force && st.ModTime().Equal(t.mu.stamp)
	t.mu.Unlock()
	if same {
		return false, nil
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return false, fmt.Errorf("--tenants %s: %w", t.path, err)
	}
	f, err := ParseTenants(data)
	if err != nil {
		t.mu.Lock()
		t.mu.stamp = st.ModTime() // reported once, not every second
		t.mu.Unlock()
		return false, fmt.Errorf("--tenants %s: %w", t.path, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.stamp = st.ModTime()
	t.mu.file = f
	t.mu.spec = map[string]*TenantSpec{}
	t.mu.class = map[string]sched.Class{}
	t.mu.defCls, _ = sched.ParseClass(f.DefaultClass) // validated by ParseTenants
	t.mu.byKey = map[string]string{}
	for i := range f.Tenants {
		s := &f.Tenants[i]
		t.mu.spec[s.Name] = s
		if s.Class != "" {
			t.mu.class[s.Name], _ = sched.ParseClass(s.Class)
		}
		for _, k := range s.APIKeys {
			t.mu.byKey[k] = s.Name
		}
		id := t.idLocked(s.Name)
		b := t.mu.buckets[id]
		if b == nil {
			b = &sched.TokenBucket{}
			t.mu.buckets[id] = b
		}
		b.SetLimit(s.Rate, s.Burst)
	}
	t.mu.dirty = true
	return true, nil
}

func (t *tenants) idLocked(name string) uint32 {
	if id, ok := t.mu.ids[name]; ok {
		return id
	}
	id := uint32(len(t.mu.names))
	t.mu.ids[name] = id
	t.mu.names = append(t.mu.names, name)
	return id
}

// identity is a request's tenant, class and session.
type identity struct {
	tenant  uint32
	name    string
	class   sched.Class
	session uint64
}

// maxTenants bounds the tenants named by headers or models alone (not in
// the file): past it they share the default tenant, so a client cannot
// grow the table without end.
const maxTenants = 1024

// identify reads a request's identity from its headers: the tenant from
// X-Kvroute-Tenant, else the bearer token's hash in the file, else the
// model; the class from X-Kvroute-Priority, else the tenant's, else the
// file's default; the session from X-Session-ID or X-Dynamo-Session-ID.
// A bad priority is an error naming the header.
func (t *tenants) identify(h *fasthttp.RequestHeader, model []byte) (identity, error) {
	var id identity
	name := string(bytes.TrimSpace(h.Peek(HeaderTenant)))
	t.mu.Lock()
	defer t.mu.Unlock()
	if name == "" && len(t.mu.byKey) > 0 {
		if a := h.Peek(fasthttp.HeaderAuthorization); len(a) > 7 && strings.EqualFold(string(a[:7]), "bearer ") {
			name = t.mu.byKey[HashAPIKey(string(bytes.TrimSpace(a[7:])))]
		}
	}
	if name == "" {
		name = string(model)
	}
	if _, ok := t.mu.ids[name]; ok || len(t.mu.names) < maxTenants {
		id.tenant, id.name = t.idLocked(name), name
	}
	if p := bytes.TrimSpace(h.Peek(HeaderPriority)); len(p) > 0 {
		c, err := sched.ParseClass(strings.ToLower(string(p)))
		if err != nil {
			return id, fieldErr(HeaderPriority, "%s must be critical, standard or sheddable, not %q", HeaderPriority, p)
		}
		id.class = c
	} else if c, ok := t.mu.class[id.name]; ok {
		id.class = c
	} else if t.mu.file.DefaultClass != "" {
		id.class = t.mu.defCls
	}
	sess := h.Peek(HeaderSession)
	if len(sess) == 0 {
		sess = h.Peek(HeaderDynamoSession)
	}
	if len(sess) > 0 {
		id.session = xxh3.Hash(sess) | 1
	}
	return id, nil
}

// take charges tokens to the tenant's bucket at now; a refusal carries the
// wait until the bucket would allow them.
func (t *tenants) take(tenant uint32, tokens uint32, now time.Time) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.mu.buckets[tenant]
	if b == nil {
		return true, 0
	}
	return b.Take(tokens, int64(now.Sub(t.epoch)))
}

// weights returns the weights to hand to the scheduler if they changed
// since the last call (nil otherwise).
func (t *tenants) weights() map[uint32]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.mu.dirty {
		return nil
	}
	t.mu.dirty = false
	w := map[uint32]float64{}
	for name, s := range t.mu.spec {
		w[t.mu.ids[name]] = s.Weight
	}
	return w
}

// name returns tenant id's name ("" for the default tenant).
func (t *tenants) name(id uint32) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(id) < len(t.mu.names) {
		return t.mu.names[id]
	}
	return ""
}

// TenantInfo is one tenant in GET /tenants.
type TenantInfo struct {
	Name         string  `json:"name"`
	Weight       float64 `json:"weight"`
	Rate         float64 `json:"rate"`
	Burst        float64 `json:"burst"`
	Bucket       float64 `json:"bucket_tokens"`
	Waiting      [3]int  `json:"waiting"` // critical, standard, sheddable
	ServedTokens uint64  `json:"served_prompt_tokens"`
	Routed       uint64  `json:"routed"`
	Share        float64 `json:"share"` // of the prompt tokens served
}

// appendInfo adds the file's figures to the scheduler's shares.
func (t *tenants) appendInfo(dst []TenantInfo, shares []sched.TenantShare, now time.Time) []TenantInfo {
	var total uint64
	for _, s := range shares {
		total += s.ServedTokens
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range shares {
		if int(s.Tenant) >= len(t.mu.names) {
			continue
		}
		name := t.mu.names[s.Tenant]
		ti := TenantInfo{Name: name, Weight: s.Weight, Waiting: s.Waiting, ServedTokens: s.ServedTokens, Routed: s.Routed}
		if sp := t.mu.spec[name]; sp != nil {
			ti.Rate, ti.Burst = sp.Rate, sp.Burst
			if b := t.mu.buckets[s.Tenant]; b != nil && sp.Rate > 0 {
				ti.Bucket = b.Level(int64(now.Sub(t.epoch)))
			}
		}
		if total > 0 {
			ti.Share = float64(s.ServedTokens) / float64(total)
		}
		dst = append(dst, ti)
	}
	return dst
}
