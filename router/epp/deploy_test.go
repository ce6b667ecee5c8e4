package epp_test

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvroute/kvroute/router/epp"
)

// docs reads every YAML document of a deploy/gateway file.
func docs(t *testing.T, name string) []map[string]any {
	t.Helper()
	f, err := os.Open("../../deploy/gateway/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, d)
	}
}

// get walks a path of map keys and list indexes ("0").
func get(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i := 0
			for _, c := range p {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestDeployFiles: the manifests name each other and the protocol as the
// EPP speaks it: the InferencePool's picker is the kvroute-epp Service on
// the port the Deployment listens on; the Envoy bootstrap runs the
// processing modes Process expects and routes on HeaderDestination.
func TestDeployFiles(t *testing.T) {
	pool := docs(t, "inferencepool.yaml")[0]
	if pool["apiVersion"] != "inference.networking.k8s.io/v1" || pool["kind"] != "InferencePool" {
		t.Fatalf("inferencepool.yaml: %v %v", pool["apiVersion"], pool["kind"])
	}
	ref, port := get(pool, "spec", "endpointPickerRef", "name"), get(pool, "spec", "endpointPickerRef", "port", "number")
	var svcPorts, env []any
	for _, d := range docs(t, "kvroute-epp.yaml") {
		if d["kind"] == "Service" && get(d, "metadata", "name") == ref {
			svcPorts = get(d, "spec", "ports").([]any)
		}
		if d["kind"] == "Deployment" && get(d, "metadata", "name") == ref {
			env = get(d, "spec", "template", "spec", "containers", "0", "env").([]any)
		}
	}
	if svcPorts == nil || env == nil {
		t.Fatalf("kvroute-epp.yaml has no Service and Deployment named %v", ref)
	}
	if get(svcPorts, "0", "port") != port {
		t.Errorf("the pool's picker port %v is not the Service's %v", port, get(svcPorts, "0", "port"))
	}
	found := false
	for _, e := range env {
		if get(e, "name") == "KVROUTE_EXT_PROC_ADDR" && strings.HasSuffix(get(e, "value").(string), ":9002") {
			found = true
		}
	}
	if !found || port != 9002 {
		t.Errorf("KVROUTE_EXT_PROC_ADDR does not listen on the pool's port %v", port)
	}
	envoy := docs(t, "envoy.yaml")[0]
	hcm := get(envoy, "static_resources", "listeners", "0", "filter_chains", "0", "filters", "0", "typed_config")
	extproc := get(hcm, "http_filters", "0", "typed_config")
	mode := get(extproc, "processing_mode").(map[string]any)
	for k, want := range map[string]string{"request_header_mode": "SEND", "request_body_mode": "FULL_DUPLEX_STREAMED",
		"request_trailer_mode": "SEND", "response_header_mode": "SEND", "response_body_mode": "FULL_DUPLEX_STREAMED"} {
		if mode[k] != want {
			t.Errorf("envoy.yaml processing_mode.%s = %v, want %s", k, mode[k], want)
		}
	}
	cl := get(envoy, "static_resources", "clusters", "0")
	if get(cl, "type") != "ORIGINAL_DST" || get(cl, "original_dst_lb_config", "http_header_name") != epp.HeaderDestination {
		t.Errorf("envoy.yaml's first cluster does not route on %s: %v", epp.HeaderDestination, cl)
	}
	if get(get(envoy, "static_resources", "clusters", "1"), "health_checks", "0", "grpc_health_check", "service_name") != epp.HealthProcessor {
		t.Errorf("envoy.yaml does not health-check %s", epp.HealthProcessor)
	}
}
