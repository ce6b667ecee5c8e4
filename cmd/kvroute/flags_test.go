package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsEnv(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	blocks := fs.Int("kv-blocks", 1, "")
	size := fs.Int("block-size", 16, "")
	t.Setenv("KVROUTE_KV_BLOCKS", "4096")
	t.Setenv("KVROUTE_BLOCK_SIZE", "99")
	if err := parseFlags(fs, []string{"--block-size", "64"}); err != nil {
		t.Fatal(err)
	}
	if *blocks != 4096 {
		t.Errorf("env not applied: kv-blocks = %d", *blocks)
	}
	if *size != 64 {
		t.Errorf("command line must win over env: block-size = %d", *size)
	}
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.Int("kv-blocks", 1, "")
	t.Setenv("KVROUTE_KV_BLOCKS", "many")
	err := parseFlags(fs2, nil)
	if err == nil || !strings.Contains(err.Error(), "--kv-blocks") || !strings.Contains(err.Error(), "KVROUTE_KV_BLOCKS") {
		t.Fatalf("want an error naming the flag and variable, got %v", err)
	}
}

// A value that does not parse, on the command line or from the
// environment, says what the flag wants.
func TestFlagValueErrorsSayWhatIsWanted(t *testing.T) {
	newSet := func() *flag.FlagSet {
		fs := newFlagSet("kvroute x")
		fs.Duration("grace", time.Second, "")
		fs.Int("kv-blocks", 1, "")
		fs.Uint64("seed", 0, "")
		fs.Bool("pprof", false, "")
		fs.Float64("weight", 1, "")
		var a autoDuration
		fs.Var(&a, "ready-delay", "")
		return fs
	}
	cases := []struct{ flag, value, want string }{
		{"grace", "5", "want a duration such as 5s"},
		{"kv-blocks", "many", "want an integer such as 4"},
		{"kv-blocks", "99999999999999999999", "out of range"},
		{"seed", "-1", "want a non-negative integer"},
		{"pprof", "yes", "want true or false"},
		{"weight", "heavy", "want a number such as 0.5"},
		{"ready-delay", "soon", "want auto or a duration such as 5s"},
	}
	for _, c := range cases {
		env := envName(c.flag)
		err := parseFlagsEnv(newSet(), nil, []string{env + "=" + c.value}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), env) ||
			!strings.Contains(err.Error(), "--"+c.flag) || strings.Contains(err.Error(), "parse error") {
			t.Errorf("%s=%s: %v; want it to name %s and --%s and say %q", env, c.value, err, env, c.flag, c.want)
		}
		err = parseFlagsEnv(newSet(), []string{"--" + c.flag + "=" + c.value}, nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--"+c.flag) ||
			strings.Contains(err.Error(), "parse error") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--%s=%s: %v; want one line naming --%s and saying %q", c.flag, c.value, err, c.flag, c.want)
		}
	}
}

// A KVROUTE_* variable that names no flag is a warning naming the closest
// flag; the tests' own variables are not flags and pass silently.
func TestUnknownEnvWarns(t *testing.T) {
	fs := newFlagSet("kvroute x")
	shards := fs.Int("shards", 1, "")
	fs.String("http-addr", "", "")
	var warn strings.Builder
	err := parseFlagsEnv(fs, nil, []string{"KVROUTE_SHRADS=4", "KVROUTE_HTTP_ADDR=:1", "KVROUTE_QWERTYUIOP=1",
		"KVROUTE_TEST_MAIN=1", "PATH=/bin"}, &warn)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(warn.String()), "\n")
	if len(lines) != 2 || *shards != 1 ||
		!strings.Contains(lines[0], "KVROUTE_QWERTYUIOP names no flag of kvroute x") ||
		!strings.Contains(lines[1], "KVROUTE_SHRADS names no flag") || !strings.Contains(lines[1], "did you mean KVROUTE_SHARDS (--shards)?") {
		t.Fatalf("warnings:\n%s", warn.String())
	}
}

// An unknown flag is one line naming the closest flag and where the flags
// are listed, not the whole usage; -h spells the flags --name.
func TestUnknownFlagOneLine(t *testing.T) {
	_, stderr, code := runMain(t, t.TempDir(), "serve", "--shrads", "2")
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "unknown flag --shrads (did you mean --shards?)") ||
		!strings.Contains(lines[0], "see kvroute serve -h") {
		t.Fatalf("exit %d, %d lines:\n%s", code, len(lines), stderr)
	}
	stdout, stderr, _ := runMain(t, t.TempDir(), "serve", "-h")
	help := stdout + stderr
	n := 0
	for _, line := range strings.Split(help, "\n") {
		if strings.HasPrefix(line, "  -") {
			n++
			if !strings.HasPrefix(line, "  --") {
				t.Errorf("help spells a flag with one dash: %q", line)
			}
		}
	}
	if n < 50 || !strings.Contains(help, "  --shards int\n") || !strings.Contains(help, `(default "127.0.0.1:8000")`) {
		t.Fatalf("help lists %d flags:\n%.600s", n, help)
	}
}
