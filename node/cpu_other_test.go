//go:build !unix

package node

import "time"

func processCPU() time.Duration { return 0 }
