package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// shutdownSignals returns a channel closed at the first SIGINT or SIGTERM,
// when a graceful shutdown starts; a second signal exits the process at
// once with status 1. stopSignals ends the watch.
func shutdownSignals(name string) (stop <-chan struct{}, stopSignals func()) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	stop = watchSignals(sig, done, name, os.Stderr, func() { os.Exit(1) })
	return stop, func() {
		signal.Stop(sig)
		close(done)
	}
}

// watchSignals closes the returned channel at the first value on sig and
// calls exit at the second, saying so on w, until done is closed.
func watchSignals(sig <-chan os.Signal, done <-chan struct{}, name string, w io.Writer, exit func()) <-chan struct{} {
	stop := make(chan struct{})
	go func() {
		select {
		case <-sig:
		case <-done:
			return
		}
		fmt.Fprintf(w, "%s: shutting down gracefully; interrupt again to exit at once\n", name)
		close(stop)
		select {
		case s := <-sig:
			fmt.Fprintf(w, "%s: second %v: exiting at once, in-flight requests are cut\n", name, s)
			exit()
		case <-done:
		}
	}()
	return stop
}
