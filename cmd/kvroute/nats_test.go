package main

import (
	"strings"
	"testing"
)

func TestNatsConfig(t *testing.T) {
	cfg, err := natsConfig([]string{"--name", "n1", "--port", "14222", "--cluster-port", "16222",
		"--routes", "nats://127.0.0.1:16222, nats://127.0.0.1:16223", "--data-dir", "/tmp/x"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "n1" || cfg.Port != 14222 || cfg.ClusterPort != 16222 || cfg.ClusterName != "kvroute" ||
		len(cfg.Routes) != 2 || cfg.Routes[1] != "nats://127.0.0.1:16223" || cfg.StoreDir != "/tmp/x" || !cfg.Log {
		t.Fatalf("config %+v", cfg)
	}
	t.Setenv("KVROUTE_CLUSTER_NAME", "prod")
	if cfg, err = natsConfig([]string{"--name", "n2", "--cluster-port", "16223"}); err != nil || cfg.ClusterName != "prod" {
		t.Fatalf("KVROUTE_CLUSTER_NAME: %+v, %v", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0"}, "--port"},
		{[]string{"--cluster-port", "4222"}, "--cluster-port"},
		{[]string{"--routes", "nats://127.0.0.1:6222"}, "--routes needs --cluster-port"},
		{[]string{"--cluster-port", "6222", "--name", "a", "--routes", "127.0.0.1:6222"}, "--routes"},
		{[]string{"--cluster-port", "6222"}, "--name"},
	} {
		if _, err := natsConfig(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
