package plane

import (
	"strings"
	"testing"
	"time"
)

// A registration from a worker that predates the disaggregation fields
// decodes as an aggregated vllm-nixl worker, validates, and encodes to the
// same bytes as before (no new keys).
func TestRegistrationWithoutPDFields(t *testing.T) {
	old := `{"worker_id":4,"instance_id":"run-a","url":"http://10.0.0.4:8000","model":"m","dp_ranks":[0,1],"block_size":16,` +
		`"kv_blocks":4096,"max_batched_tokens":8192,"event_transport":"zmq","zmq_endpoint":"tcp://10.0.0.4:5557","heartbeat_ms":1000}`
	var r Registration
	if err := Decode([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.Role != "" || r.PDProtocol != "" || r.BootstrapPort != 0 || r.RoleOrDefault() != RoleBoth || r.ProtocolOrDefault() != ProtocolVLLMNIXL {
		t.Fatalf("old registration read as %+v (role %s, protocol %s)", r, r.RoleOrDefault(), r.ProtocolOrDefault())
	}
	if got := string(Encode(r)); got != old {
		t.Fatalf("re-encoded differently:\n%s\n%s", got, old)
	}
}

func TestRegistrationPDFields(t *testing.T) {
	prefill := reg(5)
	prefill.Role, prefill.PDProtocol, prefill.BootstrapPort = RolePrefill, ProtocolSGLang, 8998
	roundTrip(t, prefill, append(registrationKeys(reg(5)), "role", "pd_protocol", "bootstrap_port")...)
	if err := prefill.Validate(); err != nil {
		t.Fatal(err)
	}
	if prefill.RoleOrDefault() != RolePrefill || prefill.ProtocolOrDefault() != ProtocolSGLang {
		t.Fatalf("%s %s", prefill.RoleOrDefault(), prefill.ProtocolOrDefault())
	}
	// Valid: every role with either protocol, an SGLang prefill worker
	// without a bootstrap port (mini_lb's default), a decode worker with one.
	for _, role := range []string{"", RoleBoth, RolePrefill, RoleDecode} {
		for _, proto := range []string{"", ProtocolVLLMNIXL, ProtocolSGLang} {
			r := reg(5)
			r.Role, r.PDProtocol = role, proto
			if err := r.Validate(); err != nil {
				t.Errorf("role %q protocol %q: %v", role, proto, err)
			}
		}
	}
	decode := reg(6)
	decode.Role, decode.PDProtocol, decode.BootstrapPort = RoleDecode, ProtocolSGLang, 9000
	if err := decode.Validate(); err != nil {
		t.Fatal(err)
	}
	// Refused, naming the field.
	for _, c := range []struct {
		role, proto string
		port        int
		field       string
	}{
		{"Prefill", "", 0, "role"},
		{"router", "", 0, "role"},
		{"", "nixl", 0, "pd_protocol"},
		{"", "SGLang", 0, "pd_protocol"},
		{RolePrefill, ProtocolSGLang, -1, "bootstrap_port"},
		{RolePrefill, ProtocolSGLang, 65536, "bootstrap_port"},
		{RolePrefill, "", 8998, "bootstrap_port"},
		{RolePrefill, ProtocolVLLMNIXL, 8998, "bootstrap_port"},
	} {
		r := reg(7)
		r.Role, r.PDProtocol, r.BootstrapPort = c.role, c.proto, c.port
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("role %q protocol %q port %d: %v, want an error naming %s", c.role, c.proto, c.port, err, c.field)
		}
		if got := registrationRule(r); got != c.field {
			t.Errorf("registrationRule(role %q protocol %q port %d) = %q, want %q", c.role, c.proto, c.port, got, c.field)
		}
	}
}

// A worker that changes its role (or protocol, or bootstrap port) is
// reported as Updated, so the router moves it between pools.
func TestRegistryRoleChange(t *testing.T) {
	r := NewRegistry()
	t0 := time.Unix(1000, 0)
	w := reg(1)
	if ch, _ := r.Heartbeat(w, t0, nil); len(ch) != 1 || ch[0].Kind != Joined {
		t.Fatalf("%v", ch)
	}
	for _, change := range []func(*Registration){
		func(r *Registration) { r.Role = RolePrefill },
		func(r *Registration) { r.PDProtocol = ProtocolSGLang },
		func(r *Registration) { r.BootstrapPort = 8998 },
	} {
		change(&w)
		ch, err := r.Heartbeat(w, t0, nil)
		if err != nil || len(ch) != 1 || ch[0].Kind != Updated || !sameRegistration(ch[0].Reg, w) {
			t.Fatalf("after %+v: %v %v", w, ch, err)
		}
		if got, _ := r.Get(1); !sameRegistration(got, w) {
			t.Fatalf("registry holds %+v, want %+v", got, w)
		}
	}
}
