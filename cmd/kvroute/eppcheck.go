package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/router/epp/eppcheck"
)

func runEppCheck(args []string) error {
	fs := newFlagSet("kvroute epp-check")
	var (
		target   = fs.String("target", "", "the endpoint picker's gRPC address (host:port) to check or to ask")
		model    = fs.String("model", "", "model the check requests name (empty: none)")
		streams  = fs.Int("streams", 100, "concurrent streams of the concurrency check")
		bigBody  = byteSize(5 << 20)
		overload = fs.Int("overload", 0, "hold up to this many streams open until the EPP answers 429, then check it (0: skip that check)")
		timeout  = fs.Duration("timeout", 30*time.Second, "time limit of each check")
		envoy    = fs.String("serve-envoy", "", "instead of checking, play Envoy on this HTTP address: each request asks --target and is forwarded to the picked endpoint")
	)
	fs.Var(&bigBody, "big-body", "size of the large-body check's request body")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("--target is required: the endpoint picker's gRPC address (host:port)")
	}
	if _, _, err := net.SplitHostPort(*target); err != nil {
		return fmt.Errorf("--target %q: want host:port: %v", *target, err)
	}
	switch {
	case *streams < 1:
		return fmt.Errorf("--streams must be >= 1 (got %d)", *streams)
	case bigBody < 1:
		return fmt.Errorf("--big-body must be >= 1 (got %d)", bigBody)
	case *overload < 0:
		return fmt.Errorf("--overload must be >= 0 (got %d)", *overload)
	case *timeout <= 0:
		return fmt.Errorf("--timeout must be > 0 (got %v)", *timeout)
	}
	if *envoy != "" {
		return serveEnvoy(*envoy, *target)
	}
	k, err := eppcheck.Dial(eppcheck.Config{Target: *target, Model: *model, Streams: *streams, BigBody: int(bigBody),
		Overload: *overload, Timeout: *timeout})
	if err != nil {
		return err
	}
	defer k.Close()
	failed := 0
	for _, r := range k.Run(context.Background()) {
		fmt.Println(r)
		if !r.OK {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed", failed)
	}
	fmt.Println("all checks passed")
	return nil
}

// serveEnvoy plays Envoy's role on listen in front of the EPP at target
// until a signal.
func serveEnvoy(listen, target string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--serve-envoy %s: %w", listen, err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("--target %s: %w", target, err)
	}
	defer conn.Close()
	srv := &http.Server{Handler: eppcheck.NewGateway(conn), ReadHeaderTimeout: 10 * time.Second}
	stop, stopSignals := shutdownSignals("kvroute epp-check")
	defer stopSignals()
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Fprintf(os.Stdout, "playing Envoy on http://%s in front of the endpoint picker %s\n", ln.Addr(), target)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
