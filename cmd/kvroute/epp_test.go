package main

import (
	"strings"
	"testing"
)

// TestEppFlags: kvroute epp's flags are validated at start, the errors
// naming the flag; serve's flags apply.
func TestEppFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ext-proc-addr", "nope"}, "--ext-proc-addr"},
		{[]string{"--epp-fallbacks", "-1"}, "--epp-fallbacks"},
		{[]string{"--epp-fallbacks", "17"}, "--epp-fallbacks"},
		{[]string{"--endpoints-interval", "0s"}, "--endpoints-interval"},
		{[]string{"--block-size", "0"}, "--block-size"},
	} {
		_, _, _, err := eppConfig(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.args, err, c.want)
		}
	}
	_, _, o, err := eppConfig([]string{"--ext-proc-addr", "0.0.0.0:9002", "--epp-fallbacks", "0", "--endpoints-file", "pods.yaml"})
	if err != nil || o.addr != "0.0.0.0:9002" || o.fallbacks != 0 || o.file != "pods.yaml" {
		t.Fatalf("%+v %v", o, err)
	}
	if err := runEppCheck([]string{"--streams", "1"}); err == nil || !strings.Contains(err.Error(), "--target") {
		t.Errorf("epp-check without --target: %v", err)
	}
	if err := runEppCheck([]string{"--target", "127.0.0.1:1", "--streams", "0"}); err == nil || !strings.Contains(err.Error(), "--streams") {
		t.Errorf("epp-check --streams 0: %v", err)
	}
}
