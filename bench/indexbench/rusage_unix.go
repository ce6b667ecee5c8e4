//go:build unix

package indexbench

import "syscall"

// usage is the process's CPU time (user, system) and page faults so far.
type usage struct {
	userNs, sysNs int64
	minFlt        int64
	nvcsw, nivcsw int64
}

func readUsage() usage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return usage{}
	}
	return usage{
		userNs: ru.Utime.Nano(), sysNs: ru.Stime.Nano(), minFlt: int64(ru.Minflt),
		nvcsw: int64(ru.Nvcsw), nivcsw: int64(ru.Nivcsw),
	}
}
