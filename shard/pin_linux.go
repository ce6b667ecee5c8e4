//go:build linux

package shard

import "golang.org/x/sys/unix"

// pinThread restricts the calling OS thread to cpus with sched_setaffinity.
// The caller must have locked its goroutine to the thread.
func pinThread(cpus []int) error {
	var set unix.CPUSet
	set.Zero()
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(0, &set)
}

// threadAffinity returns the CPUs the calling OS thread may run on.
func threadAffinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
