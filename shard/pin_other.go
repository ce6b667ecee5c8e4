//go:build !linux

package shard

import "errors"

var errPinUnsupported = errors.New("CPU pinning is supported on Linux only")

func pinThread(cpus []int) error { return errPinUnsupported }

func threadAffinity() ([]int, error) { return nil, errPinUnsupported }
